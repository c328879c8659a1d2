"""The incremental SSE parser: chunk boundaries anywhere, every line ending, garbage flagged."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from kvplan.bench.sse import SSEParser, encode_event


def feed_all(parser: SSEParser, chunks) -> list[str]:
    out = []
    for c in chunks:
        out += [e.data for e in parser.feed(c)]
    return out + [e.data for e in parser.close()]


def test_vllm_style_stream():
    raw = b'data: {"a":1}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n'
    p = SSEParser()
    assert feed_all(p, [raw]) == ['{"a":1}', '{"b":2}', "[DONE]"]
    assert not p.malformed


def test_crlf_split_between_chunks_and_cr_only():
    p = SSEParser()
    assert feed_all(p, [b"data: x\r", b"\n\r", b"\ndata: y\r\r"]) == ["x", "y"]
    assert not p.malformed


def test_comments_bom_multiline_and_fields():
    p = SSEParser()
    raw = "\ufeff: keep-alive\nevent: update\nid: 7\nretry: 100\ndata: one\ndata:two\n\n".encode()
    events = p.feed(raw)
    assert [(e.event, e.data) for e in events] == [("update", "one\ntwo")]
    assert not p.malformed


def test_utf8_split_inside_a_character():
    raw = 'data: héllo ✓\n\n'.encode()
    cut = raw.index("✓".encode()) + 1
    p = SSEParser()
    assert feed_all(p, [raw[:cut], raw[cut:]]) == ["héllo ✓"]
    assert not p.malformed


def test_garbage_is_flagged():
    p = SSEParser()
    assert feed_all(p, [b"data: ok\n\n\xff\xfe\x00garbage{{{ not sse\n\n"]) == ["ok"]
    assert p.malformed and any("UTF-8" in x or "unknown field" in x for x in p.problems)


def test_unterminated_event_at_close_is_dropped_and_flagged():
    p = SSEParser()
    assert p.feed(b"data: half") == []
    assert p.close() == []
    assert p.malformed


def test_overlong_line_is_bounded():
    p = SSEParser(max_line=1000)
    p.feed(b"x" * 5000)
    assert p.malformed and len(p._buf) == 0


# --------------------------------------------------------------------------- properties
_data = st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.lists(_data, min_size=1, max_size=3).map("\n".join), max_size=8),
       st.sampled_from(["\n", "\r\n", "\r"]), st.lists(st.integers(0, 10_000), max_size=12))
def test_property_any_chunking_any_eol_same_events(events, eol, cuts):
    # An event whose only data line is empty is still an event ("data:" then blank line)
    raw = b"".join(encode_event(e, eol) for e in events)
    points = sorted({c % (len(raw) + 1) for c in cuts})
    chunks = [raw[a:b] for a, b in zip([0] + points, points + [len(raw)])]
    p = SSEParser()
    got = feed_all(p, chunks)
    assert got == [e for e in events]
    assert not p.malformed


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=10))
def test_property_arbitrary_bytes_never_raise_and_stay_bounded(chunks):
    p = SSEParser(max_line=512)
    for c in chunks:
        for e in p.feed(c):
            assert isinstance(e.data, str)
        assert len(p._buf) <= 512 + 200
    p.close()
    assert len(p.problems) <= 20
