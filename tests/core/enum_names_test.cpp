// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/enum_names.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <string_view>

namespace {

enum class Fruit { apple, pear, plum, quince };

// apple has two aliases, one of them placed after other values; plum has none; quince is missing on purpose.
constexpr grpo::detail::EnumNames<Fruit, 5> kFruitNames{{
    {Fruit::apple, "apple"},
    {Fruit::apple, "malus"},
    {Fruit::pear, "pear"},
    {Fruit::plum, "plum"},
    {Fruit::apple, "pomme"},
}};
static_assert(grpo::detail::names_are_unique(kFruitNames));
static_assert(grpo::detail::enum_name(Fruit::plum, kFruitNames) == "plum");

GRPO_ENUM_NAMES(Fruit, kFruitNames, "fruit", parse_fruit);
static_assert(to_string(Fruit::pear) == "pear");

enum class Colour { red };  // no GRPO_ENUM_NAMES
static_assert(grpo::detail::NamedEnum<Fruit> && !grpo::detail::NamedEnum<Colour>);

}  // namespace

TEST_CASE("enum_name gives the first name of a value, 'unknown' for a value the table lacks", "[core][enum_names]") {
  using grpo::detail::enum_name;
  REQUIRE(enum_name(Fruit::apple, kFruitNames) == "apple");  // not an alias
  REQUIRE(enum_name(Fruit::pear, kFruitNames) == "pear");
  REQUIRE(enum_name(Fruit::quince, kFruitNames) == "unknown");
}

TEST_CASE("find_enum and parse_enum accept every spelling exactly, aliases included", "[core][enum_names]") {
  using grpo::detail::find_enum;
  using grpo::detail::parse_enum;
  REQUIRE(find_enum("apple", kFruitNames) == Fruit::apple);
  REQUIRE(find_enum("malus", kFruitNames) == Fruit::apple);
  REQUIRE(find_enum("pomme", kFruitNames) == Fruit::apple);
  REQUIRE(find_enum("plum", kFruitNames) == Fruit::plum);
  REQUIRE_FALSE(find_enum("Apple", kFruitNames).has_value());  // case-sensitive
  REQUIRE_FALSE(find_enum("appl", kFruitNames).has_value());   // no prefix matching
  REQUIRE_FALSE(find_enum("", kFruitNames).has_value());
  REQUIRE_FALSE(find_enum("quince", kFruitNames).has_value());
  REQUIRE(parse_enum("pomme", kFruitNames, "fruit") == Fruit::apple);
  REQUIRE(parse_enum("pear", kFruitNames, "fruit") == Fruit::pear);
}

TEST_CASE("parse_enum throws ConfigError naming what, the value and every valid name", "[core][enum_names]") {
  using grpo::detail::parse_enum;
  REQUIRE_THROWS_AS(parse_enum("fig", kFruitNames, "fruit"), grpo::ConfigError);
  // Each value once in table order, its aliases (wherever they stand in the table) in parentheses.
  REQUIRE_THROWS_WITH(parse_enum("fig", kFruitNames, "fruit"),
                      "unknown fruit 'fig'; valid: apple (aliases malus, pomme), pear, plum");
  REQUIRE_THROWS_WITH(grpo::detail::throw_unknown_name("fruit", "fig+", kFruitNames, ", optionally with '+'"),
                      "unknown fruit 'fig+'; valid: apple (aliases malus, pomme), pear, plum, optionally with '+'");
}

TEST_CASE("joined_names lists a plain list of names as given, and a table with one alias as 'alias'",
          "[core][enum_names]") {
  using grpo::detail::joined_names;
  constexpr std::array<std::string_view, 3> kPlain{"grpo", "verl_grpo", "gdpo"};
  REQUIRE(joined_names(kPlain) == "grpo, verl_grpo, gdpo");
  REQUIRE(joined_names(std::array<std::string_view, 0>{}).empty());
  constexpr grpo::detail::EnumNames<Fruit, 3> kOneAlias{{
      {Fruit::pear, "pear"},
      {Fruit::pear, "poire"},
      {Fruit::plum, "plum"},
  }};
  REQUIRE(joined_names(kOneAlias) == "pear (alias poire), plum");
}

TEST_CASE("names_are_unique rejects a spelling given twice", "[core][enum_names]") {
  constexpr grpo::detail::EnumNames<Fruit, 2> kSameValue{{{Fruit::pear, "pear"}, {Fruit::pear, "pear"}}};
  constexpr grpo::detail::EnumNames<Fruit, 2> kOtherValue{{{Fruit::pear, "pear"}, {Fruit::plum, "pear"}}};
  STATIC_REQUIRE_FALSE(grpo::detail::names_are_unique(kSameValue));
  STATIC_REQUIRE_FALSE(grpo::detail::names_are_unique(kOtherValue));
}

TEST_CASE("GRPO_ENUM_NAMES: to_string, the parse function and the enum_names hook all read the one table",
          "[core][enum_names]") {
  REQUIRE(to_string(Fruit::apple) == "apple");
  REQUIRE(to_string(Fruit::quince) == "unknown");
  REQUIRE(parse_fruit("pomme") == Fruit::apple);
  REQUIRE(parse_fruit("plum") == Fruit::plum);
  REQUIRE_THROWS_MATCHES(parse_fruit("kiwi"), grpo::ConfigError,
                         Catch::Message("unknown fruit 'kiwi'; valid: apple (aliases malus, pomme), pear, plum"));
  const auto table = enum_names(Fruit::pear);  // found by argument-dependent lookup, as option tables find it
  REQUIRE(table.what == "fruit");
  REQUIRE(table.names.size() == kFruitNames.size());
  REQUIRE(table.names.data() == kFruitNames.data());
}
