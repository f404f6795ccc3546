"""The compare report's variant table stays inside the page: a column per metric scrolls sideways in its
own box (variant names kept in view) instead of widening the page."""
import re

from pipelines.compare import _html


def test_variant_table_scrolls_inside_the_page():
    # Prepare: a section with 24 metric columns (wider than any page at 13 px)
    rows = [{"variant": f"v{i}", **{f"a_long_metric_name_{j}": 1.0 / (j + 1) for j in range(24)}} for i in range(3)]
    section = ("exp", "exp: latest run", rows, [], [], {}, False, [])
    # Execute
    page = _html([section], "sqlite:///x.db")
    # Assert: the table sits in a box that scrolls horizontally, headers may wrap, the first column sticks
    box = re.search(r"<div class=wide><table>(.*?)</table></div>", page, re.S)
    assert box and box.group(1).count("<th>") == 25 and box.group(1).count("<tr>") == 4
    css = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    assert ".wide{overflow-x:auto;max-width:100%}" in css
    assert ".wide th{white-space:normal" in css and "position:sticky;left:0" in css
