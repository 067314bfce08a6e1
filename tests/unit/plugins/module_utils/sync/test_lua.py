"""The Lua tokenizer under the lsyncd config reader."""

from __future__ import annotations

from ansible_collections.llamarpc.cluster.plugins.module_utils.sync import _lua

# -- tokenizer -------------------------------------------------------------------------------------------


def test_tokenize_strings_comments_and_numbers():
    text = (
        "-- line comment sync{}\n--[==[ long\n comment sync{} ]==]\n"
        "a = 'it\\'s' .. \"tab\\there\" .. [[long\nstring]] .. [=[with ]] inside]=]"
        ' .. 0x1F .. 1.5e3 .. "\\65\\x42\\u{43}"'
    )
    tokens, problems = _lua.tokenize(text)
    assert problems == []
    strings = [t.value for t in tokens if t.kind == "string"]
    assert strings == ["it's", "tab\there", "long\nstring", "with ]] inside", "ABC"]
    numbers = [t.value for t in tokens if t.kind == "number"]
    assert numbers == ["0x1F", "1.5e3"]
    assert not any(t.is_name("sync") for t in tokens)


def test_tokenize_reports_unterminated_pieces():
    for text, word in (("a = 'open", "string"), ("--[[ never closed", "comment"), ("x = [==[ open", "long string")):
        _tokens, problems = _lua.tokenize(text)
        assert any(word in p for p in problems), (text, problems)
