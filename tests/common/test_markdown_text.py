"""The markdown escaper of values from links and files (sde_core.common.markdown_text): any text
renders as exactly that text — parsed here with markdown-it-py (CommonMark with GFM's tables and
strikethrough) — with no link, image, emphasis, HTML or block, and no plain-text word that GFM's
autolinks or Streamlit's icons, emoji and directives could rewrite."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from sde_core.common.markdown_text import md_literal, md_plain, visible

_MD = MarkdownIt("commonmark").enable(["table", "strikethrough"])
#: What GFM autolinks and Streamlit's icon/emoji/directive rewriting look for in plain text.
_REWRITTEN = re.compile(r"://|@|www\.|:\S", re.IGNORECASE)
#: Text built from markdown's own characters, so Hypothesis finds the constructs quickly.
_MARKDOWNY = st.text(
    alphabet=st.sampled_from(list("`*_[]()!<>&#~$|:@/\\.-+= \tw1\n\u2028é\x00")) | st.characters(),
    max_size=60,
)
_ATTACK = "0000` [Re-login here](http://evil.example/x) ![t](http://127.0.0.1:9/track.png) `"


def _rendered(markdown: str) -> tuple[str, list[str], list[str]]:
    """The text a reader sees, the token types, and the plain-text (non-code) pieces."""
    blocks = _MD.parse(markdown)
    types = [t.type for t in blocks]
    shown: list[str] = []
    plain: list[str] = []
    for block in blocks:
        for child in block.children or []:
            types.append(child.type)
            if child.type in ("text", "code_inline"):
                shown.append(child.content)
                if child.type == "text":
                    plain.append(child.content)
    return "".join(shown), types, plain


def _only_text(types: list[str]) -> bool:
    allowed = {"paragraph_open", "inline", "paragraph_close", "text", "code_inline"}
    return set(types) <= allowed


@settings(max_examples=400, deadline=None)
@given(_MARKDOWNY)
@example(_ATTACK)
@example("")
@example(" ` ")
@example("   ")
def test_a_literal_renders_as_its_text_and_nothing_else(text):
    shown, types, plain = _rendered(md_literal(text))
    assert _only_text(types), (text, types)
    assert not plain or plain == ["(empty)"]  # all of it in code font: nothing is rewritten
    assert shown == (visible(text) if text else "(empty)")


@settings(max_examples=400, deadline=None)
@given(_MARKDOWNY)
@example(_ATTACK)
@example("# heading -> 1. list > quote www.evil.example a@b.org :material/warning: :red[x]")
@example("$x$ ~~gone~~ **bold** <img src=x> &amp; | a | b |")
def test_a_sentence_renders_as_its_text_and_no_word_can_be_rewritten(text):
    shown, types, plain = _rendered(md_plain(text))
    assert _only_text(types), (text, types)
    assert shown == visible(text).strip()
    for piece in plain:
        assert not _REWRITTEN.search(piece), (text, piece)


def test_the_issue_31_link_renders_no_link_and_fetches_no_image():
    html = _MD.render("The link's wsh " + md_literal(_ATTACK) + " is not this workspace's.")
    assert "<a " not in html and "<img" not in html
    assert "[Re-login here](http://evil.example/x)" in html


@pytest.mark.parametrize("text", ["a\nb", "a\r\n\r\nb", "x\u2028y", "\x1b[31m"])
def test_line_breaks_and_control_characters_are_shown_as_escapes(text):
    assert "\n" not in md_literal(text) and "\n" not in md_plain(text)
    assert _rendered(md_literal(text))[0] == visible(text)
    assert visible("a\nb") == "a\\nb" and visible("\x1b") == "\\x1b"
