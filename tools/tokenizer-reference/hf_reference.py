# SPDX-License-Identifier: Apache-2.0
"""Hugging Face's own tokenizer (the Rust `tokenizers` package from PyPI) and chat-template rendering as
transformers does it, shared by reference.py, corpus_ids.py and time_encode.py. Install with scripts/python-env.sh."""
import json
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.sandbox
from tokenizers import Tokenizer


def load(directory):
    """(Tokenizer, tokenizer_config dict) of a directory with tokenizer.json and tokenizer_config.json."""
    directory = Path(directory)
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    config = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
    return tokenizer, config


def special_token(config, name):
    """A special token of tokenizer_config.json as text (it is a string or an AddedToken object), or ""."""
    value = config.get(name)
    if isinstance(value, dict):
        value = value.get("content")
    return value or ""


def render_chat(config, messages, add_generation_prompt, enable_thinking=None, tools=None):
    """tokenizer_config.json's chat_template rendered as transformers' apply_chat_template renders it: a sandboxed
    Jinja environment with trim_blocks, lstrip_blocks and loop controls, tojson without ASCII escapes, and the
    raise_exception / strftime_now globals. One difference: an attribute of an undefined value is undefined
    (ChainableUndefined), as in Hugging Face's JavaScript Jinja, so that an empty conversation renders (Qwen3's
    template reads messages[0].role, which transformers reports as an error there).
    `tools` (a list of JSON schemas as Python values, e.g. {"type": "function", "function": {...}}) becomes the
    template's `tools` variable, as apply_chat_template(tools=...) passes it; left out (undefined) when None. Messages
    may carry transformers' tool calls: an assistant message's "tool_calls" is a list of {"type": "function",
    "function": {"name": ..., "arguments": {...}}} with the arguments as a Python dict, and a "tool" message's
    "content" is the tool's response."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                               extensions=[jinja2.ext.loopcontrols],
                                                               undefined=jinja2.ChainableUndefined)
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    context = {"messages": messages, "add_generation_prompt": add_generation_prompt,
               "bos_token": special_token(config, "bos_token"), "eos_token": special_token(config, "eos_token")}
    if enable_thinking is not None:
        context["enable_thinking"] = enable_thinking
    if tools is not None:
        context["tools"] = tools
    return environment.from_string(config["chat_template"]).render(**context)


def read_corpus(source):
    """The "text" of every JSON line of a corpus (tests/text/data/corpus.jsonl), in order: a path or an open file."""
    if isinstance(source, (str, Path)):
        with open(source, encoding="utf-8") as lines:
            return read_corpus(lines)
    return [json.loads(line)["text"] for line in source if line.strip()]
