"""The built documentation site gives a new reader what the pages promise.

CI builds the site first, in an environment holding the docs extra alone, and points
``RESGRAD_SITE`` at it (``.ci/run``); without it, the site is built here once, into a
temporary directory, with the notebooks' execution off (their markdown is still there).

- every command in the search index is titled ``resgrad NAME``, with no HTML escapes;
- every guide page's main index entries (its ``{index}`` line) lead to that page, and the
  search scorer lifts guide pages, so a topic's name finds its guide first;
- the CLI reference states each default once (in the help text, not again as ``Default:``);
- every figure of the guide opens full size on click, and the site's stylesheet is linked
  on every page, holding code and printed tables to their lines (scrolling sideways in
  their box, never wrapped);
- search lists each guide page once for its topic's name (its top index entries point at
  the page itself); the CLI reference's usage lines are plain text; the site has a favicon;
- notebook 02's page says that its sliders need a kernel and loads no widget script from
  the network.
"""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
GUIDE = sorted(p.stem for p in (ROOT / "docs" / "guide").glob("*.md") if p.stem != "index")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> pathlib.Path:
    if os.environ.get("RESGRAD_SITE"):
        built = pathlib.Path(os.environ["RESGRAD_SITE"])
        assert (built / "searchindex.js").exists(), f"RESGRAD_SITE={built} holds no site"
        return built
    out = tmp_path_factory.mktemp("site")
    p = subprocess.run([sys.executable, "-m", "sphinx", "-q", "-W", "--keep-going", "-b", "html",
                        "-D", "nb_execution_mode=off", "-d", str(out / ".doctrees"),
                        str(ROOT / "docs"), str(out)], capture_output=True, text=True,
                       timeout=1200)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def _index(site: pathlib.Path) -> dict:
    text = (site / "searchindex.js").read_text()
    return json.loads(text[text.index("(") + 1 : text.rindex(")")])


def test_commands_are_found_by_their_names(site):
    idx = _index(site)
    kind = next(k for k, v in idx["objnames"].items() if v[:2] == ["commands", "command"])
    names = [o[4] for entries in idx["objects"].values() for o in entries if str(o[1]) == kind]
    assert "resgrad lesion" in names and "resgrad depth" in names, names
    assert all(n == "resgrad" or re.fullmatch(r"resgrad [a-z-]+( [a-z-]+)?", n) for n in names)
    assert "resgrad experiment robustness" in names, names
    assert not [n for n in names if "&#" in n or len(n) > 40]


def _index_lines(page: str) -> list[str]:
    text = (ROOT / "docs" / "guide" / f"{page}.md").read_text()
    m = re.search(r"^```\{index\} (.+)$", text, flags=re.M)
    assert m, f"docs/guide/{page}.md has no {{index}} line under its title"
    return [t.strip().lstrip("!") for t in m[1].split(",")]


@pytest.mark.parametrize("page", GUIDE)
def test_a_topics_name_leads_to_its_guide_page(site, page):
    idx = _index(site)
    doc = idx["docnames"].index(f"guide/{page}")
    for term in _index_lines(page):
        entries = idx["indexentries"].get(term, [])
        assert [e for e in entries if e[0] == doc and e[2]], (page, term, entries)


def test_the_search_scorer_lifts_the_guide(site):
    page = (site / "search.html").read_text()
    m = re.search(r'src="([^"]*language_data\.js[^"]*)"', page)  # Sphinx puts the scorer there
    assert m and page.index(m[0]) > page.index("searchtools.js"), "no scorer after the search"
    scorer = (site / m[1].split("?")[0]).read_text()
    assert re.search(r"GUIDE_LIFT\s*=\s*[1-9]\d*", scorer) and '"guide/"' in scorer


def test_the_cli_reference_states_each_default_once(site):
    html = (site / "cli.html").read_text()
    assert "Default:" not in html
    assert "(default: 1,5,10,20)" in html  # the help text's own


@pytest.mark.parametrize("page", ["lesion", "paths", "flow"])
def test_guide_figures_open_full_size_and_code_wraps(site, page):
    html = (site / "guide" / f"{page}.html").read_text()
    images = re.findall(r"<img [^>]*src=\"(\.\./_images/[^\"]+)\"", html)
    linked = re.findall(r'resgrad-figure-link[^>]*href="(\.\./_images/[^"]+)"', html)
    assert images and sorted(set(images)) == sorted(set(linked)), (images, linked)
    assert all((site / "guide" / link).exists() for link in linked)
    assert re.search(r'href="[^"]*_static/resgrad\.css', html)


def _pre_rules(css: str) -> list[str]:
    """The bodies of the stylesheet's rules whose selectors name a ``pre``."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    return [
        body for sel, body in re.findall(r"([^{}]+)\{([^}]*)\}", css) if re.search(r"\bpre\b", sel)
    ]


def test_wide_code_and_tables_scroll_instead_of_wrapping(site):
    css = (site / "_static" / "resgrad.css").read_text()
    rules = _pre_rules(css)
    assert rules and all("white-space: pre;" in r and "overflow-x: auto" in r for r in rules)
    assert "pre-wrap" not in css and "anywhere" not in css
    # it covers the printed tables of the guide (text blocks) and of the notebooks' outputs
    sel = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    assert "div.highlight pre" in sel and "div.cell_output pre" in sel


def test_a_stylesheet_that_wraps_is_caught():
    """Not vacuous: the rule this round replaced would fail."""
    old = "div.highlight pre {\n  white-space: pre-wrap;\n  overflow-wrap: anywhere;\n}"
    assert not all("white-space: pre;" in r for r in _pre_rules(old))


def test_search_lists_each_guide_page_once(site):
    idx = _index(site)
    guide = {i for i, d in enumerate(idx["docnames"]) if d.startswith("guide/")}
    for page in GUIDE:
        doc = idx["docnames"].index(f"guide/{page}")
        for term in _index_lines(page):  # the topic's names: a result equal to the page's
            anchors = {e[1] for e in idx["indexentries"][term] if e[0] == doc}
            assert anchors == {""}, (page, term, anchors)
    assert guide


def test_usage_lines_are_plain_text_and_the_site_has_a_favicon(site):
    html = (site / "cli.html").read_text()
    # each usage block: the top one ("usage: resgrad ...") and each command's ("resgrad X [-h]")
    usages = re.findall(r'<div class="highlight-(\w+) notranslate"[^>]*><div class="highlight">'
                        r"<pre><span></span>(?:usage: )?resgrad[\w -]* \[-h\]", html)  # fmt: skip
    assert len(usages) > 20 and set(usages) == {"none"}, usages
    assert "experiment robustness" in html and "out/experiment-robustness" in html
    assert (site / "favicon.ico").read_bytes()[:4] == b"\x00\x00\x01\x00"  # an ICO
    index = (site / "index.html").read_text()
    assert re.search(r'<link rel="icon" href="_static/favicon\.png"', index)


def test_the_explorer_page_teaches_without_a_kernel(site):
    html = (site / "notebooks" / "02_gradient_flow_explorer.html").read_text()
    assert "Where no kernel runs, the sliders do not move." in html
    assert not re.search(r"<script[^>]+(unpkg|jsdelivr|cdnjs)", html)
