// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/io/layered_config.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using grpo::io::ConfigNode;
using grpo::io::parse_config;

namespace {

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("grpo_layered_config_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Writes `text` to `relative` (creating directories) and returns the full path.
  fs::path write(const std::string& relative, const std::string& text) const {
    const fs::path file = path_ / relative;
    fs::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }
  // The "file:line" a node from `relative` reports.
  std::string at_line(const std::string& relative, int line) const {
    return (path_ / relative).string() + ":" + std::to_string(line);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::vector<std::string> keys_of(const ConfigNode& map) {
  std::vector<std::string> keys;
  for (const auto& entry : map.entries()) keys.push_back(entry.first);
  return keys;
}

}  // namespace

TEST_CASE("parse_config: YAML scalars, lists and maps with file:line and key paths", "[io][layered_config]") {
  const ConfigNode root = parse_config(
      "# a run\n"                // 1
      "name: dapo  # comment\n"  // 2
      "steps: 200\n"             // 3
      "lr: 1e-3\n"               // 4
      "quoted: \"3\"\n"          // 5
      "flag: true\n"             // 6
      "nothing:\n"               // 7
      "model:\n"                 // 8
      "  dir: models/qwen\n"     // 9
      "  layers: [1, 2]\n"       // 10
      "rewards:\n"               // 11
      "  - name: accuracy\n"     // 12
      "  - name: format\n"       // 13
      "    weight: 0.5\n",       // 14
      "run.yaml");
  CHECK(root.is_map());
  CHECK(root.path().empty());
  CHECK(keys_of(root) ==
        std::vector<std::string>{"name", "steps", "lr", "quoted", "flag", "nothing", "model", "rewards"});
  CHECK(root.at("name").text() == "dapo");
  CHECK(root.at("name").source() == "run.yaml:2");
  CHECK(root.at("name").path() == "name");
  CHECK(root.at("steps").integer() == 200);
  CHECK_FALSE(root.at("steps").quoted());
  CHECK(root.at("lr").number() == 1e-3);
  CHECK(root.at("lr").source() == "run.yaml:4");
  CHECK(root.at("quoted").text() == "3");
  CHECK(root.at("quoted").quoted());
  CHECK(root.at("flag").boolean());
  CHECK(root.at("nothing").is_null());
  CHECK(root.at("nothing").source() == "run.yaml:7");  // the key's line, not where the (empty) value would be

  const ConfigNode& model = root.at("model");
  CHECK(model.is_map());
  CHECK(model.source() == "run.yaml:8");
  CHECK(model.at("dir").source() == "run.yaml:9");
  CHECK(model.at("dir").path() == "model.dir");
  CHECK(model.at("layers").texts() == std::vector<std::string>{"1", "2"});
  CHECK(model.at("layers").items()[1].path() == "model.layers[1]");
  CHECK(model.at("layers").items()[1].integer() == 2);
  CHECK(model.find("absent") == nullptr);

  const ConfigNode& rewards = root.at("rewards");
  REQUIRE(rewards.items().size() == 2);
  CHECK(rewards.items()[0].source() == "run.yaml:12");
  CHECK(rewards.items()[1].at("weight").source() == "run.yaml:14");
  CHECK(rewards.items()[1].at("weight").path() == "rewards[1].weight");
  CHECK(rewards.items()[1].at("weight").number() == 0.5);
}

TEST_CASE("parse_config: JSON text parses too, with the line of every key", "[io][layered_config]") {
  const ConfigNode root = parse_config(
      "{\n"                      // 1
      "  \"model\": {\n"         // 2
      "    \"dir\": \"m\",\n"    // 3
      "    \"layers\": 2\n"      // 4
      "  },\n"                   // 5
      "  \"weights\": [1, 0.5],\n"  // 6
      "  \"name\": \"3\",\n"     // 7
      "  \"none\": null\n"       // 8
      "}\n",
      "run.json");
  CHECK(keys_of(root) == std::vector<std::string>{"model", "weights", "name", "none"});
  CHECK(root.at("model").source() == "run.json:2");
  CHECK(root.at("model").at("dir").source() == "run.json:3");
  CHECK(root.at("model").at("dir").quoted());
  CHECK(root.at("model").at("layers").source() == "run.json:4");
  CHECK(root.at("model").at("layers").integer() == 2);
  CHECK_FALSE(root.at("model").at("layers").quoted());
  CHECK(root.at("weights").items()[1].number() == 0.5);
  CHECK(root.at("name").source() == "run.json:7");
  CHECK(root.at("name").quoted());
  CHECK(root.at("none").is_null());
}

TEST_CASE("parse_config: anchors resolve to copies, empty documents are empty maps, tags", "[io][layered_config]") {
  const ConfigNode root = parse_config(
      "base: &b {x: 1, y: [1, 2]}\n"  // 1
      "copy: *b\n"                    // 2
      "text: !!str 3\n",              // 3
      "a.yaml");
  const ConfigNode& copy = root.at("copy");
  CHECK(copy.source() == "a.yaml:2");
  CHECK(copy.at("x").integer() == 1);
  CHECK(copy.at("x").source() == "a.yaml:1");  // where the anchored value was written
  CHECK(copy.at("y").items()[1].path() == "copy.y[1]");
  CHECK(root.at("text").quoted());

  CHECK(parse_config("\xEF\xBB\xBF" "a: 'x'\n", "bom.yaml").at("a").text() == "x");  // UTF-8 byte-order mark
  CHECK(parse_config("", "e.yaml").entries().empty());
  CHECK(parse_config("# only a comment\n", "e.yaml").entries().empty());
  CHECK(parse_config("~\n", "e.yaml").is_map());
}

TEST_CASE("parse_config: malformed text, repeated keys and non-map roots name file and line",
          "[io][layered_config]") {
  // Repeated keys (yaml-cpp itself keeps both): the second one's line and column, and the first one's line.
  CHECK_THROWS_WITH(parse_config("a: 1\nb:\n  c: 1\n  c: 2\n", "x.yaml"),
                    Catch::Contains("x.yaml:4:3: key 'b.c' is repeated (first written at x.yaml:3)"));
  CHECK_THROWS_WITH(parse_config("{\n\"a\": 1,\n\"a\": 2}", "x.json"),
                    Catch::Contains("x.json:3:1: key 'a' is repeated (first written at x.json:2)"));
  CHECK_THROWS_WITH(parse_config("l:\n  - {k: 1, k: 2}\n", "x.yaml"), Catch::Contains("x.yaml:2:") &&
                                                                          Catch::Contains("key 'l[0].k' is repeated"));
  CHECK_THROWS_AS(parse_config("a: 1\na: 1\n", "x.yaml"), grpo::ParseError);

  // yaml-cpp's messages, positioned.
  CHECK_THROWS_WITH(parse_config("a: [1, 2\nb: 3\n", "x.yaml"),
                    Catch::Contains("x.yaml:2:") && Catch::Contains("end of sequence flow not found"));
  CHECK_THROWS_AS(parse_config("a: [1, 2\nb: 3\n", "x.yaml"), grpo::ParseError);
  CHECK_THROWS_WITH(parse_config("a:\n  b: 1\n c: 2\n", "x.yaml"), Catch::Contains("x.yaml:3:"));
  CHECK_THROWS_WITH(parse_config("x: 1\na: b: c\n", "x.yaml"), Catch::Contains("x.yaml:2:"));
  // yaml-cpp 0.7 alone would read the rest of the file into the string.
  CHECK_THROWS_WITH(parse_config("a: 1\nb: \"open\nc: 1\n", "x.yaml"),
                    Catch::Contains("x.yaml:2:4: a quoted string has no closing \""));
  CHECK_THROWS_WITH(parse_config("b: 'it''s\n", "x.yaml"), Catch::Contains("x.yaml:1:4: a quoted string has no closing '"));
  CHECK(parse_config("b: 'it''s'\nc: \"q\\\"\"\n", "x.yaml").at("c").text() == "q\"");

  CHECK_THROWS_WITH(parse_config("- 1\n- 2\n", "x.yaml"),
                    Catch::Contains("x.yaml:1: the top level of a config should be a map") && Catch::Contains("a list"));
  CHECK_THROWS_AS(parse_config("just text", "x.yaml"), grpo::ConfigError);
  CHECK_THROWS_WITH(parse_config("base: &b {x: 1}\nother:\n  <<: *b\n", "x.yaml"),
                    Catch::Contains("x.yaml:3:3:") && Catch::Contains("'<<'"));
  CHECK_THROWS_WITH(parse_config("a: 1\n---\nb: 2\n", "x.yaml"),
                    Catch::Contains("x.yaml:2:") && Catch::Contains("second YAML document"));
  CHECK_THROWS_WITH(parse_config("a: !custom 3\n", "x.yaml"),
                    Catch::Contains("x.yaml:1:") && Catch::Contains("unsupported tag '!custom'"));
  CHECK_THROWS_WITH(parse_config("? [1, 2]\n: x\n", "x.yaml"), Catch::Contains("map key should be"));
  CHECK_THROWS_WITH(parse_config("a: &r [1, *r]\n", "x.yaml"), Catch::Contains("x.yaml:1:"));
}

TEST_CASE("ConfigNode typed getters: values and errors naming source, path and what was expected",
          "[io][layered_config]") {
  const ConfigNode root = parse_config(
      "model:\n"               // 1
      "  name: qwen\n"         // 2
      "  layers: two\n"        // 3
      "  heads: 2.5\n"         // 4
      "  flags: yes\n"         // 5
      "  list: [1, {a: 1}]\n"  // 6
      "numbers: [.5, +1, -2e3, 1., .inf, -.inf, 0x10, 1e4, 1_000, 9223372036854775807, 9223372036854775808, 1e400, "
      "'7', True, FALSE]\n",  // 7
      "c.yaml");
  const ConfigNode& model = root.at("model");
  CHECK_THROWS_WITH(model.at("layers").integer(), "c.yaml:3: 'model.layers' should be an integer, got 'two'");
  CHECK_THROWS_AS(model.at("layers").integer(), grpo::ConfigError);
  CHECK_THROWS_WITH(model.at("heads").integer(), "c.yaml:4: 'model.heads' should be an integer, got '2.5'");
  CHECK(model.at("heads").number() == 2.5);
  CHECK_THROWS_WITH(model.at("flags").boolean(), "c.yaml:5: 'model.flags' should be true or false, got 'yes'");
  CHECK_THROWS_WITH(model.at("name").number(), "c.yaml:2: 'model.name' should be a number, got 'qwen'");
  CHECK_THROWS_WITH(model.text(), "c.yaml:1: 'model' should be text, got a map");
  CHECK_THROWS_WITH(model.items(), "c.yaml:1: 'model' should be a list, got a map");
  CHECK_THROWS_WITH(model.at("missing"), "c.yaml:1: missing key 'model.missing'");
  CHECK_THROWS_WITH(root.at("absent"), "c.yaml:1: missing key 'absent'");
  CHECK_THROWS_WITH(model.at("list").texts(), "c.yaml:6: 'model.list[1]' should be text, got a map");
  CHECK_THROWS_WITH(model.at("name").find("x"), "c.yaml:2: 'model.name' should be a map, got 'qwen'");
  CHECK(model.at("name").texts() == std::vector<std::string>{"qwen"});

  const auto& n = root.at("numbers").items();
  REQUIRE(n.size() == 15);
  CHECK(n[0].number() == 0.5);
  CHECK(n[1].number() == 1.0);
  CHECK(n[1].integer() == 1);
  CHECK(n[2].number() == -2000.0);
  CHECK(n[2].integer() == -2000);
  CHECK(n[3].number() == 1.0);
  CHECK(std::isinf(n[4].number()));
  CHECK(n[4].number() > 0);
  CHECK(n[5].number() < 0);
  CHECK_THROWS_WITH(n[6].number(), "c.yaml:7: 'numbers[6]' should be a number, got '0x10'");
  CHECK(n[7].integer() == 10000);
  CHECK_THROWS_AS(n[8].number(), grpo::ConfigError);
  CHECK(n[9].integer() == 9223372036854775807LL);
  CHECK_THROWS_WITH(n[10].integer(), Catch::Contains("should be an integer within 64 bits"));
  CHECK_THROWS_WITH(n[11].number(), Catch::Contains("should be a number within double range"));
  CHECK(n[12].integer() == 7);  // quoted numbers still read as numbers when asked for one
  CHECK(n[13].boolean());
  CHECK_FALSE(n[14].boolean());
}

TEST_CASE("merge_config: maps merge deeply, lists and scalars (and null) replace", "[io][layered_config]") {
  ConfigNode base = parse_config(
      "model: {dir: a, dtype: bf16, extra: {k: 1}}\n"  // 1
      "rewards: [x, y, z]\n"                           // 2
      "lr: 1\n"                                        // 3
      "keep: kept\n"                                   // 4
      "gone: 3\n"                                      // 5
      "to_scalar: {a: 1}\n"                            // 6
      "to_map: 1\n",                                   // 7
      "base.yaml");
  const ConfigNode over = parse_config(
      "model: {dir: b, extra: {j: 2}}\n"  // 1
      "rewards: [w]\n"                    // 2
      "lr: 2\n"                           // 3
      "gone: null\n"                      // 4
      "added: new\n"                      // 5
      "to_scalar: 3\n"                    // 6
      "to_map: {a: 1}\n",                 // 7
      "over.yaml");
  grpo::io::merge_config(base, over);
  CHECK(keys_of(base) ==
        std::vector<std::string>{"model", "rewards", "lr", "keep", "gone", "to_scalar", "to_map", "added"});
  const ConfigNode& model = base.at("model");
  CHECK(keys_of(model) == std::vector<std::string>{"dir", "dtype", "extra"});
  CHECK(model.at("dir").text() == "b");
  CHECK(model.at("dir").source() == "over.yaml:1");
  CHECK(model.at("dtype").text() == "bf16");
  CHECK(model.at("dtype").source() == "base.yaml:1");
  CHECK(keys_of(model.at("extra")) == std::vector<std::string>{"k", "j"});
  CHECK(base.at("rewards").texts() == std::vector<std::string>{"w"});
  CHECK(base.at("lr").integer() == 2);
  CHECK(base.at("keep").text() == "kept");
  CHECK(base.at("gone").is_null());
  CHECK(base.at("gone").source() == "over.yaml:4");
  CHECK(base.at("added").text() == "new");
  CHECK(base.at("to_scalar").integer() == 3);
  CHECK(base.at("to_map").at("a").path() == "to_map.a");
}

TEST_CASE("load_layered_config: a extends b extends c, relative to each file's directory", "[io][layered_config]") {
  TempDir dir;
  const fs::path top = dir.write("runs/exp/a.yaml",
                                 "extends: ../../configs/b.yaml\n"  // 1
                                 "loss:\n"                          // 2
                                 "  beta: 0.0\n");                  // 3
  dir.write("configs/b.yaml",
            "extends: base/c.yaml\n"  // 1
            "loss:\n"                 // 2
            "  type: dapo\n"          // 3
            "model:\n"                // 4
            "  dir: b-model\n");      // 5
  dir.write("configs/base/c.yaml",
            "loss:\n"            // 1
            "  type: grpo\n"     // 2
            "  beta: 0.04\n"     // 3
            "  epsilon: 0.2\n"   // 4
            "model:\n"           // 5
            "  dir: c-model\n"   // 6
            "  dtype: bf16\n"    // 7
            "steps: 100\n");     // 8
  const ConfigNode config = grpo::io::load_layered_config(top);
  CHECK(keys_of(config) == std::vector<std::string>{"loss", "model", "steps"});  // no 'extends'
  CHECK(config.at("loss").at("type").text() == "dapo");
  CHECK(config.at("loss").at("type").source() == dir.at_line("configs/b.yaml", 3));
  CHECK(config.at("loss").at("beta").number() == 0.0);
  CHECK(config.at("loss").at("beta").source() == dir.at_line("runs/exp/a.yaml", 3));
  CHECK(config.at("loss").at("epsilon").number() == 0.2);
  CHECK(config.at("loss").at("epsilon").source() == dir.at_line("configs/base/c.yaml", 4));
  CHECK(config.at("model").at("dir").text() == "b-model");
  CHECK(config.at("model").at("dtype").text() == "bf16");
  CHECK(config.at("steps").integer() == 100);
  CHECK(config.at("steps").path() == "steps");

  // Other base key names: 'extends' is then an ordinary key.
  dir.write("runs/other.yaml", "inherit: exp/a.yaml\nextends: kept\n");
  const ConfigNode other = grpo::io::load_layered_config(dir.path() / "runs/other.yaml", {.base_keys = {"inherit"}});
  CHECK(other.at("extends").text() == "kept");
  CHECK(keys_of(other.at("loss")) == std::vector<std::string>{"beta"});  // a's own 'extends' was not followed
  CHECK(other.find("inherit") == nullptr);
  CHECK(other.find("model") == nullptr);
}

TEST_CASE("load_layered_config: 'defaults' as a list merges left to right, then the file", "[io][layered_config]") {
  TempDir dir;
  const fs::path top = dir.write("main.yaml",
                                 "defaults:\n"     // 1
                                 "  - one.yaml\n"  // 2
                                 "  - two.yaml\n"  // 3
                                 "x: main\n");     // 4
  dir.write("one.yaml", "x: one\ny: one\nz: one\nlist: [1]\n");
  dir.write("two.yaml", "y: two\nlist: [2, 3]\n");
  const ConfigNode config = grpo::io::load_layered_config(top);
  CHECK(keys_of(config) == std::vector<std::string>{"x", "y", "z", "list"});
  CHECK(config.at("x").text() == "main");
  CHECK(config.at("x").source() == dir.at_line("main.yaml", 4));
  CHECK(config.at("y").text() == "two");
  CHECK(config.at("y").source() == dir.at_line("two.yaml", 1));
  CHECK(config.at("z").text() == "one");
  CHECK(config.at("list").texts() == std::vector<std::string>{"2", "3"});

  // A diamond (both bases share one) is not a cycle.
  dir.write("d/top.yaml", "extends: [l.yaml, r.yaml]\n");
  dir.write("d/l.yaml", "extends: common.yaml\nl: 1\n");
  dir.write("d/r.yaml", "extends: common.yaml\nr: 1\n");
  dir.write("d/common.yaml", "c: 1\n");
  CHECK(keys_of(grpo::io::load_layered_config(dir.path() / "d/top.yaml")) == std::vector<std::string>{"c", "l", "r"});
}

TEST_CASE("load_layered_config: cycles, missing files and bad base keys are errors naming the chain and line",
          "[io][layered_config]") {
  TempDir dir;
  const fs::path a = dir.write("a.yaml", "extends: b.yaml\nx: 1\n");
  dir.write("b.yaml", "y: 2\nextends: a.yaml\n");
  CHECK_THROWS_WITH(grpo::io::load_layered_config(a),
                    Catch::Contains(dir.at_line("b.yaml", 2) + ": config cycle: a.yaml -> b.yaml -> a.yaml"));
  CHECK_THROWS_AS(grpo::io::load_layered_config(a), grpo::ConfigError);

  const fs::path self = dir.write("s.yaml", "extends: [s.yaml]\n");
  CHECK_THROWS_WITH(grpo::io::load_layered_config(self),
                    Catch::Contains(dir.at_line("s.yaml", 1) + ": config cycle: s.yaml -> s.yaml"));

  const fs::path top = dir.write("top.yaml", "extends: d.yaml\n");
  dir.write("d.yaml", "extends: sub/c.yaml\n");
  dir.write("sub/c.yaml", "extends: ../d.yaml\n");
  CHECK_THROWS_WITH(grpo::io::load_layered_config(top),
                    Catch::Contains("config cycle: top.yaml -> d.yaml -> sub/c.yaml -> d.yaml"));

  const fs::path missing = dir.write("m.yaml", "x: 1\nextends: nothere.yaml\n");
  CHECK_THROWS_WITH(grpo::io::load_layered_config(missing),
                    Catch::Contains(dir.at_line("m.yaml", 2) + ": cannot read base config") &&
                        Catch::Contains((dir.path() / "nothere.yaml").string()) && Catch::Contains("no such file"));
  CHECK_THROWS_AS(grpo::io::load_layered_config(missing), grpo::ConfigError);
  CHECK_THROWS_WITH(grpo::io::load_layered_config(dir.path() / "absent.yaml"),
                    Catch::Contains("cannot read config") && Catch::Contains("absent.yaml"));

  const fs::path bad_map = dir.write("bad_map.yaml", "extends: {a: 1}\n");
  CHECK_THROWS_WITH(grpo::io::load_layered_config(bad_map),
                    Catch::Contains(dir.at_line("bad_map.yaml", 1) + ": 'extends' should be a path or a list of paths"));
  const fs::path bad_item = dir.write("bad_item.yaml", "extends:\n  - a.yaml\n  - [b]\n");
  CHECK_THROWS_WITH(grpo::io::load_layered_config(bad_item),
                    Catch::Contains(dir.at_line("bad_item.yaml", 3) + ": 'extends[1]' should be a path"));

  const fs::path broken = dir.write("broken.yaml", "extends: broken_base.yaml\n");
  dir.write("broken_base.yaml", "a: 1\nb: [\n");
  CHECK_THROWS_AS(grpo::io::load_layered_config(broken), grpo::ParseError);
  CHECK_THROWS_WITH(grpo::io::load_layered_config(broken), Catch::Contains("broken_base.yaml:"));
}

TEST_CASE("apply_config_override: --set values, nested creation, replacement and errors", "[io][layered_config]") {
  ConfigNode config = parse_config(
      "model:\n"                             // 1
      "  dir: m\n"                           // 2
      "rewards: [a, b]\n"                    // 3
      "lr: 1\n"                              // 4
      "name: x\n"                            // 5
      "loss: {type: grpo, beta: 0.04}\n"     // 6
      "nothing:\n",                          // 7
      "run.yaml");
  using grpo::io::apply_config_override;

  apply_config_override(config, "lr=3e-4");
  CHECK(config.at("lr").number() == 3e-4);
  CHECK(config.at("lr").source() == "--set lr=3e-4");

  apply_config_override(config, "new.deep.key=true");
  CHECK(config.at("new").at("deep").at("key").boolean());
  CHECK(config.at("new").source() == "--set new.deep.key=true");
  CHECK(config.at("new").at("deep").at("key").path() == "new.deep.key");

  apply_config_override(config, "rewards=[c]");
  CHECK(config.at("rewards").texts() == std::vector<std::string>{"c"});
  CHECK(config.at("rewards").items()[0].path() == "rewards[0]");
  CHECK(config.at("rewards").items()[0].source() == "--set rewards=[c]");

  apply_config_override(config, "loss={beta: 0, kl: k3}");
  CHECK(keys_of(config.at("loss")) == std::vector<std::string>{"type", "beta", "kl"});
  CHECK(config.at("loss").at("type").text() == "grpo");
  CHECK(config.at("loss").at("type").source() == "run.yaml:6");
  CHECK(config.at("loss").at("beta").integer() == 0);
  CHECK(config.at("loss").at("kl").source() == "--set loss={beta: 0, kl: k3}");

  apply_config_override(config, "model.dir=");
  CHECK(config.at("model").at("dir").text().empty());
  CHECK(grpo::io::to_json(config.at("model")) == R"({"dir":""})");

  apply_config_override(config, "name='3'");
  CHECK(grpo::io::to_json(config.at("name")) == R"("3")");
  apply_config_override(config, "steps=10");
  CHECK(grpo::io::to_json(config.at("steps")) == "10");
  apply_config_override(config, "nothing.a=1");  // a null on the path becomes a map
  CHECK(config.at("nothing").at("a").integer() == 1);
  apply_config_override(config, " spaced.key = hello world");
  CHECK(config.at("spaced").at("key").text() == "hello world");
  apply_config_override(config, "model.dir=null");
  CHECK(config.at("model").at("dir").is_null());

  CHECK_THROWS_WITH(apply_config_override(config, "lr.x=1"),
                    "--set lr.x=1: cannot set 'lr.x': 'lr' is '3e-4' (written at --set lr=3e-4), not a map");
  CHECK_THROWS_WITH(apply_config_override(config, "rewards.x=1"),
                    Catch::Contains("'rewards' is a list (written at --set rewards=[c])"));
  CHECK_THROWS_AS(apply_config_override(config, "rewards.x=1"), grpo::ConfigError);
  CHECK_THROWS_WITH(apply_config_override(config, "noequals"), Catch::Contains("--set noequals: expected key.path=value"));
  CHECK_THROWS_WITH(apply_config_override(config, "=3"), Catch::Contains("key path before '=' is empty"));
  CHECK_THROWS_WITH(apply_config_override(config, "a..b=1"), Catch::Contains("'a..b' has an empty component"));
  CHECK_THROWS_AS(apply_config_override(config, "x=[1, "), grpo::ParseError);
  CHECK_THROWS_WITH(apply_config_override(config, "x=[1, "), Catch::Contains("--set x=[1, "));
}

TEST_CASE("unread_keys: misspelt keys at any depth, with the line of the file that wrote them",
          "[io][layered_config]") {
  TempDir dir;
  dir.write("base.yaml",
            "model:\n"        // 1
            "  dir: m\n"      // 2
            "  dtpye: bf16\n"  // 3: misspelt
            "lr: 1\n");       // 4
  const fs::path run = dir.write("run.yaml",
                                 "extends: base.yaml\n"  // 1
                                 "model:\n"              // 2
                                 "  dir: n\n"            // 3
                                 "extra:\n"              // 4
                                 "  a: 1\n"              // 5
                                 "rewards:\n"            // 6
                                 "  - name: acc\n"       // 7
                                 "    wieght: 1\n");     // 8
  ConfigNode config = grpo::io::load_layered_config(run);
  grpo::io::apply_config_override(config, "modle.dir=x");
  CHECK(config.at("model").at("dir").text() == "n");
  CHECK(config.at("lr").integer() == 1);
  CHECK(config.at("rewards").items()[0].at("name").text() == "acc");

  const std::vector<std::string> expected = {
      dir.at_line("base.yaml", 3) + ": unknown key 'model.dtpye'",
      dir.at_line("run.yaml", 4) + ": unknown key 'extra'",
      dir.at_line("run.yaml", 8) + ": unknown key 'rewards[0].wieght'",
      "--set modle.dir=x: unknown key 'modle'",
  };
  CHECK(grpo::io::unread_keys(config) == expected);
  CHECK_THROWS_WITH(grpo::io::reject_unread_keys(config),
                    expected[0] + "\n" + expected[1] + "\n" + expected[2] + "\n" + expected[3]);
  CHECK_THROWS_AS(grpo::io::reject_unread_keys(config), grpo::ConfigError);

  config.at("extra").mark_read();  // handed on whole (to_json, say)
  CHECK(config.at("extra").at("a").was_read());
  CHECK(config.find("model")->find("dtpye") != nullptr);
  CHECK(config.at("rewards").items()[0].contains("wieght"));
  CHECK_FALSE(config.at("rewards").items()[0].at("wieght").quoted());
  config.erase("modle");
  CHECK(grpo::io::unread_keys(config).empty());
  CHECK_NOTHROW(grpo::io::reject_unread_keys(config));
}

TEST_CASE("to_json: typed scalars, escapes, and a round trip through parse_config", "[io][layered_config]") {
  const ConfigNode root = parse_config(
      "name: dapo\n"
      "count: 3\n"
      "neg: -2\n"
      "plus: +1\n"
      "half: .5\n"
      "exp: 1e-3\n"
      "quoted: \"3\"\n"
      "flag: true\n"
      "Flag2: False\n"
      "nothing: null\n"
      "empty: \"\"\n"
      "text: 'He said \"hi\"\\n'\n"
      "ctl: \"a\\x01b\\tc\"\n"
      "multi: |\n"
      "  line1\n"
      "  line2\n"
      "list: [1, two, [3], {k: v}]\n"
      "inf: .inf\n"
      "hex: 0x1F\n"
      "utf8: é\n",
      "t.yaml");
  const std::string json = grpo::io::to_json(root);
  CHECK(json ==
        R"({"name":"dapo","count":3,"neg":-2,"plus":1,"half":0.5,"exp":1e-3,"quoted":"3","flag":true,"Flag2":false,)"
        R"("nothing":null,"empty":"","text":"He said \"hi\"\\n","ctl":"a\u0001b\tc","multi":"line1\nline2\n",)"
        R"("list":[1,"two",[3],{"k":"v"}],"inf":".inf","hex":"0x1F","utf8":"é"})");
  CHECK(grpo::io::to_json(root.at("list")) == R"([1,"two",[3],{"k":"v"}])");
  CHECK(grpo::io::to_json(root.at("count")) == "3");

  // Parsed back, the JSON gives the same values (and the same JSON).
  const ConfigNode back = parse_config(json, "t.json");
  CHECK(grpo::io::to_json(back) == json);
  CHECK(keys_of(back) == keys_of(root));
  CHECK(back.at("count").integer() == 3);
  CHECK(back.at("plus").integer() == 1);
  CHECK(back.at("half").number() == 0.5);
  CHECK(back.at("quoted").text() == "3");
  CHECK(back.at("quoted").quoted());
  CHECK_FALSE(back.at("Flag2").boolean());
  CHECK(back.at("nothing").is_null());
  CHECK(back.at("text").text() == "He said \"hi\"\\n");
  CHECK(back.at("ctl").text() == "a\x01" "b\tc");
  CHECK(back.at("multi").text() == "line1\nline2\n");
  CHECK(back.at("list").items()[3].at("k").text() == "v");
  CHECK(back.at("list").items()[3].at("k").path() == "list[3].k");
  CHECK(back.at("utf8").text() == "é");
}

TEST_CASE("ConfigNode builders: set, erase, push_back keep key paths", "[io][layered_config]") {
  ConfigNode root = ConfigNode::empty_map("built");
  ConfigNode list = ConfigNode::empty_list("built");
  list.push_back(ConfigNode::scalar_value("1", false, "built"));
  ConfigNode& stored = root.set("outer", ConfigNode::empty_map("built")).set("items", std::move(list));
  CHECK(stored.path() == "outer.items");
  CHECK(stored.items()[0].path() == "outer.items[0]");
  stored.push_back(ConfigNode::null_value("built"));
  CHECK(stored.items()[1].path() == "outer.items[1]");
  CHECK(grpo::io::to_json(root) == R"({"outer":{"items":[1,null]}})");
  CHECK(root.erase("outer"));
  CHECK_FALSE(root.erase("outer"));
  CHECK_THROWS_WITH(ConfigNode().set("a", ConfigNode()), "'' should be a map, got null");
}
