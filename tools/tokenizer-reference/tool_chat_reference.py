#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes tests/text/data/tool_chat_reference.jsonl: tool-calling conversations rendered by the real Qwen2.5 and Qwen3
Jinja chat templates (hf_reference.render_chat, as transformers' apply_chat_template renders them), with the Qwen3
tokenizer's ids, for tests/text/tool_chat_test.cpp. Usage (from the repository root):
    .venv/bin/python tools/tokenizer-reference/tool_chat_reference.py [output.jsonl]
Deterministic: the output changes only when this file, the templates or the tokenizer do.

Templates:
  qwen2.5  tests/data/tokenizers/qwen2.5_chat_template.jinja: the "chat_template" of Qwen/Qwen2.5-7B-Instruct's
           tokenizer_config.json, https://huggingface.co/Qwen/Qwen2.5-7B-Instruct/blob/main/tokenizer_config.json,
           verbatim as llama.cpp keeps it in its test data:
           https://github.com/ggerganov/llama.cpp/blob/eaca756ecca033e6fdd241dad091974a2c0354ff/tests/chat/templates/Qwen-Qwen2.5-7B-Instruct.jinja
  qwen3    the "chat_template" of tests/data/tokenizers/qwen3/tokenizer_config.json.
Tokenizer: tests/data/tokenizers/qwen3/tokenizer.json.xz (Qwen2.5 and Qwen3 share these special tokens), unpacked
into a temporary directory.

Each line is one case, a JSON object:
  name, template ("qwen2.5" or "qwen3"), enable_thinking (only when set)
  tools       the tools' schemas as JSON texts (what ChatRenderOptions::tools holds; rendered via json.loads)
  messages    [{role, content, reasoning_content (optional), tool_calls (optional): [{name, arguments}]}], each
              call's arguments as JSON text (ToolCallRequest::arguments_json; given to Jinja as a dict, as
              transformers expects). The texts are deliberately not in json.dumps's form (compact, \\u escapes,
              1E2-style numbers), so that the C++ side has to re-serialise them.
  first_user  index of the first user message
  prefix      render of messages[:first_user + 1] with add_generation_prompt=True
  render      render of all messages, add_generation_prompt=False
  ids         the Qwen3 tokenizer's ids of `render` (add_special_tokens=False)
  rollout, rollout_ids  only where a rollout differs from `render`: Qwen3 with enable_thinking=False, whose template
              drops the empty think block of every assistant turn but the last, while each turn's generation prompt
              (and ChatTemplate::tool_response_fragment) has one. `rollout` is `render` with that block put back
              after the header of every earlier assistant turn.
The script checks, with the Hugging Face tokenizer, what the C++ test checks with grpo's: the prefix, each assistant
turn's text + "<|im_end|>", the text between an answered turn and the next assistant content, and the final "\\n",
encoded one by one, give the ids of the whole render (or of the rollout)."""
import json
import lzma
import sys
import tempfile
from pathlib import Path

from tokenizers import Tokenizer

from hf_reference import render_chat

ROOT = Path(__file__).resolve().parents[2]
TOKENIZERS = ROOT / "tests" / "data" / "tokenizers"
OUTPUT = ROOT / "tests" / "text" / "data" / "tool_chat_reference.jsonl"

CALCULATOR = ('{"type":"function","function":{"name":"calculator","description":"Evaluate an arithmetic expression, '
              'e.g. 2*(3+4); returns a number.","parameters":{"type":"object","properties":{"expression":'
              '{"type":"string","description":"The expression: digits, + - * / ^ and parentheses"}},'
              '"required":["expression"]}}}')
WEATHER = ('{ "type": "function", "function": { "name": "get_weather",\n'
           '  "description": "M\\u00e9t\\u00e9o actuelle \\u2014 天气 \\u2014 for a place (\\u00b0C).\\nUse \\"metric\\" '
           'units unless asked;\\tdays \\u2264 7.",\n'
           '  "parameters": { "type": "object", "properties": {\n'
           '    "location": { "type": "object", "description": "Où: city and country",\n'
           '      "properties": { "city": { "type": "string" }, "country": { "type": "string", '
           '"enum": ["FR", "DE", "日本", "\\u00c9tats-Unis"] } },\n'
           '      "required": ["city"] },\n'
           '    "units": { "type": "string", "enum": ["metric", "imperial"], "default": "metric" },\n'
           '    "days": { "type": "integer", "minimum": 1, "maximum": 7E0 },\n'
           '    "threshold": { "type": "number", "default": 0.50, "exclusiveMinimum": -1e-7, "multipleOf": 1e16 } },\n'
           '  "required": ["location"], "additionalProperties": false } } }')
SEARCH = ('{"type":"function","function":{"name":"search","description":"Search the knowledge base \\/ wiki; returns '
          'the top hits as JSON.","parameters":{"type":"object","properties":{"query":{"type":"string"},'
          '"top_k":{"type":"integer","default":3},"filters":{"type":"array","items":{"type":"object","properties":'
          '{"field":{"type":"string"},"value":{}}}}},"required":["query"]}}}')


def call(name, arguments):
    return {"name": name, "arguments": arguments}


def user(content):
    return {"role": "user", "content": content}


def assistant(content, *calls, reasoning=None):
    message = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = list(calls)
    return message


def tool(content):
    return {"role": "tool", "content": content}


def system(content):
    return {"role": "system", "content": content}


def conversations():
    """(name, tools, messages, enable_thinking, templates) of every case."""
    one_call = [
        user("What is 12*(3+4)?"),
        assistant("", call("calculator", '{"expression":"12*(3+4)"}')),
        tool("84"),
        assistant("12*(3+4) = 84."),
    ]
    two_calls = [
        system("You are a careful assistant. Use the tools when they help."),
        user("Compute (17*23) and then add 1.5e3 to it."),
        assistant("I'll compute the product first.", call("calculator", '{ "expression" : "17*23" }')),
        tool("391"),
        assistant("", call("calculator", '{"expression": "391 + 1.5e3", "precision": 1E2, "exact": false}')),
        tool("1891.0"),
        assistant("17*23 = 391, and 391 + 1500 = 1891."),
    ]
    three_calls = [
        user("Find the capital of Japan, its weather, and the temperature in Fahrenheit."),
        assistant("", call("search",
                           '{"query":"capital of Japan","top_k":1,"filters":[{"field":"type","value":null}]}')),
        tool('[{"title": "Tokyo", "snippet": "Tokyo (東京) is the capital of Japan."}]'),
        assistant("The capital is Tokyo.",
                  call("get_weather", '{"location":{"city":"\\u6771\\u4eac","country":"日本"},"units":"metric",'
                                      '"days":1}')),
        tool('{"temperature": 21.5, "unit": "°C", "sky": "晴れ"}'),
        assistant("", call("calculator", '{"expression":"21.5*9/5+32"}')),
        tool("70.7"),
        assistant("Tokyo is the capital of Japan; it is 21.5 °C there (70.7 °F), and sunny."),
    ]
    parallel = [
        system("Réponds en français. 答えは短く。"),
        user("Quel temps fait-il à Paris et à Tokyo, et combien font 2^10 ?"),
        assistant("Je consulte les deux villes et je calcule.",
                  call("get_weather", '{"location": {"city": "Paris", "country": "FR"}, "threshold": 0.1, "scale": 1.0, '
                                      '"tiny": 1e-07, "huge": 1e16, "id": 123456789012345678901234567890}'),
                  call("get_weather", '{"location":{"city":"T\\u014dky\\u014d","country":"日本"},"units":"imperial"}'),
                  call("calculator", '{"expression":"2^10","note":"tab\\there, quote \\" and backslash \\\\"}')),
        tool('{"temperature": 14, "sky": "nuageux"}'),
        tool('{"temperature": 70, "sky": "clear"}'),
        tool("1024"),
        assistant("Paris : 14 °C, nuageux. Tokyo : 70 °F, dégagé. 2^10 = 1024."),
    ]
    error_then_retry = [
        user("Divide 10 by the number of moons of Venus, then tell me 10/4."),
        assistant("",
                  call("calculator", '{"expression":"10/0"}'),
                  call("calculator", '{"expression":"10/4"}')),
        tool("Error: division by zero (the expression '10/0' has no value)"),
        tool("2.5"),
        assistant("Venus has no moons, so the first division is undefined.",
                  call("search", '{"query":"moons of Venus"}')),
        tool("Error: tool 'search' timed out after 30 s"),
        assistant("Venus has no moons, so 10 cannot be divided by their number; 10/4 = 2.5."),
    ]
    no_tools_listed = [
        user("What is 2+2?"),
        assistant("", call("calculator", '{"expression":"2+2"}')),
        tool("4"),
        assistant("4."),
    ]
    reasoning = [
        user("What is 12*(3+4)? Then square it."),
        assistant("", call("calculator", '{"expression":"12*(3+4)"}'),
                  reasoning="The user wants 12*(3+4). I should use the calculator."),
        tool("84"),
        assistant("Now the square.", call("calculator", '{"expression":"84^2"}'),
                  reasoning="84 squared: call the calculator again.\n\nTo be exact."),
        tool("7056"),
        assistant("12*(3+4) = 84, and 84² = 7056.", reasoning="Both results are in; answer."),
    ]
    all_tools = [CALCULATOR, WEATHER, SEARCH]
    both = ("qwen2.5", "qwen3")
    return [
        ("one_call", [CALCULATOR], one_call, None, both),
        ("two_calls_with_system", [CALCULATOR], two_calls, None, both),
        ("three_calls", all_tools, three_calls, None, both),
        ("parallel_calls_non_ascii_system", [WEATHER, CALCULATOR], parallel, None, both),
        ("tool_errors", [CALCULATOR, SEARCH], error_then_retry, None, both),
        ("calls_without_tools_listed", [], no_tools_listed, None, both),
        ("no_thinking", [CALCULATOR], two_calls, False, ("qwen3",)),
        ("no_thinking_parallel", [WEATHER, CALCULATOR], parallel, False, ("qwen3",)),
        ("reasoning", [CALCULATOR], reasoning, None, ("qwen3",)),
    ]


def jinja_messages(messages):
    """The messages as transformers takes them: tool calls with their arguments as dicts."""
    out = []
    for m in messages:
        m = dict(m)
        if "tool_calls" in m:
            m["tool_calls"] = [{"type": "function",
                                "function": {"name": c["name"], "arguments": json.loads(c["arguments"])}}
                               for c in m["tool_calls"]]
        out.append(m)
    return out


def tojson(text):
    return json.dumps(json.loads(text), ensure_ascii=False)


def assistant_text(template, messages, i, enable_thinking):
    """What the whole render shows between assistant message i's header and its <|im_end|>, minus what the header's
    generation prompt already holds (Qwen3's empty think block when enable_thinking is False): what was sampled."""
    m = messages[i]
    text = m["content"]
    if template == "qwen3" and enable_thinking is not False:
        # Every assistant message of these cases follows the last user query.
        if m.get("reasoning_content") or i == len(messages) - 1:
            text = "<think>\n" + m.get("reasoning_content", "").strip("\n") + "\n</think>\n\n" + text
    for k, c in enumerate(m.get("tool_calls", [])):
        if k > 0 or m["content"]:
            text += "\n"
        text += '<tool_call>\n{"name": "' + c["name"] + '", "arguments": ' + tojson(c["arguments"]) + "}\n</tool_call>"
    return text


def pieces(template, messages, first_user, prefix, enable_thinking):
    """The texts a rollout is made of, in order (see the module docstring)."""
    out = [prefix]
    i = first_user + 1
    while i < len(messages):
        assert messages[i]["role"] == "assistant", (i, messages[i])
        out.append(assistant_text(template, messages, i, enable_thinking) + "<|im_end|>")
        j = i + 1
        while j < len(messages) and messages[j]["role"] == "tool":
            j += 1
        if j > i + 1:
            fragment = "\n<|im_start|>user"
            for m in messages[i + 1:j]:
                fragment += "\n<tool_response>\n" + m["content"] + "\n</tool_response>"
            fragment += "<|im_end|>\n<|im_start|>assistant\n"
            if template == "qwen3" and enable_thinking is False:
                fragment += "<think>\n\n</think>\n\n"
            out.append(fragment)
        i = j
    out.append("\n")
    return out


def main():
    output = Path(sys.argv[1]) if len(sys.argv) > 1 else OUTPUT
    qwen3_config = json.loads((TOKENIZERS / "qwen3" / "tokenizer_config.json").read_text(encoding="utf-8"))
    configs = {
        "qwen2.5": {"chat_template": (TOKENIZERS / "qwen2.5_chat_template.jinja").read_text(encoding="utf-8")},
        "qwen3": qwen3_config,
    }
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "tokenizer.json"
        path.write_bytes(lzma.decompress((TOKENIZERS / "qwen3" / "tokenizer.json.xz").read_bytes()))
        tokenizer = Tokenizer.from_file(str(path))

    def encode(text):
        return tokenizer.encode(text, add_special_tokens=False).ids

    lines = []
    for name, tools, messages, enable_thinking, templates in conversations():
        for template in templates:
            config = configs[template]
            jinja = jinja_messages(messages)
            schemas = [json.loads(t) for t in tools] if tools else None
            first_user = next(i for i, m in enumerate(messages) if m["role"] == "user")
            prefix = render_chat(config, jinja[:first_user + 1], True, enable_thinking, schemas)
            render = render_chat(config, jinja, False, enable_thinking, schemas)
            case = {"name": name, "template": template}
            if enable_thinking is not None:
                case["enable_thinking"] = enable_thinking
            case.update({"tools": tools, "messages": messages, "first_user": first_user, "prefix": prefix,
                         "render": render, "ids": encode(render)})
            expected = render
            if template == "qwen3" and enable_thinking is False:
                header = "<|im_start|>assistant\n"
                last = render.rindex(header)
                expected = render[:last].replace(header, header + "<think>\n\n</think>\n\n") + render[last:]
                case["rollout"] = expected
                case["rollout_ids"] = encode(expected)
            parts = pieces(template, messages, first_user, prefix, enable_thinking)
            assert "".join(parts) == expected, f"{name} / {template}: the pieces do not make up the render"
            assert sum((encode(p) for p in parts), []) == encode(expected), \
                f"{name} / {template}: the pieces' ids are not the render's"
            lines.append(json.dumps(case, ensure_ascii=False))
    output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} cases to {output}")


if __name__ == "__main__":
    main()
