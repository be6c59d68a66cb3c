"""Trace row accounting: every row is loaded or reported with its own line number, and loaded +
reported = the rows in the file, whatever a bad line holds (an unterminated quote, a field over
csv's 131,072-character limit, bad JSON on the first line). Azure day keys ignore leading blanks."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from qmodel.errors import TraceRowError
from qmodel.validation.traces import clear_cache, load_trace

HEADER = "arrival_s,prompt_tokens,output_tokens"


from tests.trace_files import fresh_trace_cache, write_trace as _write  # noqa: F401 (autouse fixture)


def test_unterminated_quote_is_its_own_line_and_loses_nothing(tmp_path):
    # line 4 of 10 opens a quote it never closes: csv over the whole text ran on to the end of the
    # file and reported "line 11" with 7 rows lost; each line is its own row
    lines = [HEADER] + [f"{i},10,10" for i in range(9)]
    lines[3] = '2,"10,10'
    p = _write(tmp_path, "q.csv", "\n".join(lines) + "\n")
    with pytest.raises(TraceRowError) as e:
        load_trace(p)
    assert [ln for ln, _ in e.value.bad] == [4] and "CSV" in e.value.bad[0][1]
    tr = load_trace(p, on_error="skip")
    assert tr.meta["skipped_lines"] == [4]
    assert len(tr) == 8 and len(tr) + len(tr.meta["skipped_lines"]) == 9  # 9 data rows in the file


@pytest.mark.parametrize("quoted", [False, True])
def test_field_over_the_csv_limit_is_a_row_error(tmp_path, quoted: bool):
    big = "2" * 140_000
    field = f'"{big}"' if quoted else big
    p = _write(tmp_path, "big.csv", f"{HEADER}\n0,1,1\n1,{field},1\n2,3,3\n")
    with pytest.raises(TraceRowError) as e:
        load_trace(p)
    assert [ln for ln, _ in e.value.bad] == [3]
    assert len(str(e.value)) < 300  # the bad value is quoted cut short, not whole
    tr = load_trace(p, on_error="skip")
    assert len(tr) == 2 and tr.meta["skipped_lines"] == [3]


def test_bad_first_jsonl_record_names_its_line(tmp_path):
    good = '{"timestamp": %d, "input_length": 10, "output_length": 5}'
    p = _write(tmp_path, "m.jsonl", '{"timestamp": 0, "input_length": 10\n' + "\n".join(good % t for t in (1, 2)) + "\n")
    with pytest.raises(TraceRowError) as e:
        load_trace(p)
    assert [ln for ln, _ in e.value.bad] == [1]
    tr = load_trace(p, on_error="skip")
    assert tr.format == "mooncake" and len(tr) == 2 and tr.meta["skipped_lines"] == [1]


def test_jsonl_line_numbers_count_only_newlines(tmp_path):
    # U+2028 inside a JSON string is valid JSON; str.splitlines() split there and misnumbered
    rows = ['{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1, "note": "a\u2028b"}',
            '{"arrival_s": 1, "prompt_tokens": 0, "output_tokens": 1}']
    p = _write(tmp_path, "q.jsonl", "\n".join(rows) + "\n")
    with pytest.raises(TraceRowError) as e:
        load_trace(p)
    assert [ln for ln, _ in e.value.bad] == [2]


def test_no_json_object_at_all_names_the_first_line(tmp_path):
    from qmodel.errors import DataError

    p = _write(tmp_path, "x.jsonl", "\n# c\nnot json\n")
    with pytest.raises(DataError, match="line 3 is not a JSON object"):
        load_trace(p)


def test_azure_leading_blanks_do_not_share_a_day(tmp_path):
    # " 2023-11-16..." and " 2023-11-17..." once shared the day key " 2023-11-1": 86,398 s apart
    p = _write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                  " 2023-11-16 23:59:59.0000000,10,10\n 2023-11-17 00:00:01.0000000,10,10\n")
    tr = load_trace(p)
    assert list(tr.arrival_s) == [0.0, 2.0]  # exact: integer-ns clock


_JUNK = st.sampled_from(['"', '""', ",", "x", "-1", "1e999", "\t", " ", "[", "{", "9" * 20])


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 12), damage=st.dictionaries(st.integers(0, 11), st.lists(_JUNK, min_size=1, max_size=4)))
def test_loaded_plus_reported_is_every_row(tmp_path_factory, n: int, damage: dict[int, list[str]]):
    lines = [f"{i},{i + 1},{i + 2}" for i in range(n)]
    for i, junk in damage.items():
        if i < n:
            lines[i] = lines[i][: len(lines[i]) // 2] + "".join(junk)
    p = tmp_path_factory.mktemp("rows") / "t.csv"
    p.write_text("\n".join([HEADER, *lines]), encoding="utf-8")
    clear_cache()
    try:
        tr = load_trace(p, on_error="skip")
    except Exception as err:  # every row bad: the one error says how many and where
        assert "no valid requests" in str(err) and f"{n} malformed" in str(err)
        return
    skipped = tr.meta.get("skipped_lines", [])
    assert len(tr) + len(skipped) == n
    assert all(2 <= ln <= n + 1 for ln in skipped) and len(set(skipped)) == len(skipped)
    for i in range(n):  # a line with an odd number of quotes is never loaded
        if lines[i].count('"') % 2:
            assert i + 2 in skipped


@pytest.mark.parametrize("name,text,line", [
    ("t.csv", f"{HEADER}\n0,1,1\n1,{10**20},1\n", 3),
    ("t.jsonl", '{"timestamp": 0, "input_length": 1, "output_length": 1}\n'
                '{"timestamp": 1, "input_length": %d, "output_length": 1}\n' % 10**20, 2),
])
def test_token_count_beyond_int64_is_a_row_error(tmp_path, name: str, text: str, line: int):
    # found by the property above: 10**20 tokens passed the parser and overflowed the int64
    # arrays (OverflowError traceback); counts above MAX_TOKENS (2**31 - 1) are that row's error
    p = _write(tmp_path, name, text)
    with pytest.raises(TraceRowError) as e:
        load_trace(p)
    assert [ln for ln, _ in e.value.bad] == [line] and "tokens" in e.value.bad[0][1]
