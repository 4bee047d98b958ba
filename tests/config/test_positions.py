from lre.config._positions import line_index, line_of

TEXT = """// comment with { braces [ and "quotes
{
  a: 1,
  "b": { c: 'x}', /* block
  comment */ d: [
    10,
    { e: true },
  ],
  },
  f: "multi\\
line",
  g: 2,
}
"""


def test_line_index_follows_keys_and_elements() -> None:
    lines = line_index(TEXT)
    assert lines[("a",)] == 3
    assert lines[("b",)] == 4
    assert lines[("b", "c")] == 4
    assert lines[("b", "d")] == 5
    assert lines[("b", "d", 0)] == 6
    assert lines[("b", "d", 1)] == 7
    assert lines[("b", "d", 1, "e")] == 7
    assert lines[("f",)] == 10
    assert lines[("g",)] == 12


def test_line_of_falls_back_to_parent() -> None:
    lines = line_index(TEXT)
    assert line_of(("b", "d", 1, "missing"), lines) == 7
    assert line_of(("nope",), lines) == 2


def test_broken_text_keeps_lines_found_so_far() -> None:
    assert line_index('{ a: "unterminated') == {(): 1, ("a",): 1}
