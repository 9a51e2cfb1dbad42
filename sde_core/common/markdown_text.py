"""Text someone else chose, shown in a markdown message as exactly that text — never markdown.

Streamlit renders the body of ``st.markdown``, ``st.warning``, ``st.error``, ``st.info``,
``st.caption`` and the label of a button as GitHub-flavoured markdown: ``[text](url)`` is a
link, ``![t](url)`` makes the browser fetch an image, a bare ``www.x.org``, ``https://…`` or
``a@b.org`` becomes a link, ``:name:`` an icon or emoji, ``:red[…]`` coloured text, ``$…$``
math. A value decoded from a link (a workspace folder, a hash, a model or layer name, even a
parameter's name) or read from a file someone sent must reach such a message only through
this module:

- :func:`md_literal` — one value as an inline code span (fenced by more backticks than it
  contains, padded where CommonMark would strip a space): inside a code span nothing is
  parsed, and the link, emoji and icon rewriting of GFM and Streamlit only touch plain text;
- :func:`md_plain` — a sentence that may contain such values (an error message): each ASCII
  markdown character is backslash-escaped, and each word that GFM or Streamlit could turn into
  a link, an icon or a directive (it holds ``://``, ``@``, ``www.`` or a ``:`` before
  another character) becomes a code span.

Both render on one line: control characters (line breaks included, which could end the code
span or start a block) are shown as their escape, ``\\n``, ``\\x1b``, ``\\u2028``.
"""

from __future__ import annotations

import re

__all__ = ["md_literal", "md_plain", "visible"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_BACKTICKS = re.compile(r"`+")
#: Characters that open or close an inline construct of CommonMark, GFM or Streamlit.
_SPECIAL = re.compile(r"([\\`*_\[\]<>&~$|!{}])")
#: A word GFM could autolink or Streamlit could turn into an icon, emoji or directive.
_LINKISH = re.compile(r"://|@|www\.|:\S", re.IGNORECASE)
#: What starts a block at the beginning of a line (heading, quote, list, rule, setext, fence).
_BLOCK_START = re.compile(r"^([#>+=\-]|\d+[.)])")


def _escape(char: re.Match[str]) -> str:
    c = char.group(0)
    if c in ("\n", "\r", "\t"):
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}[c]
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every control character (and U+2028/U+2029) written as its escape."""
    return _CONTROL.sub(_escape, text)


def md_literal(value: object) -> str:
    """Markdown that renders as the text of ``value`` (:func:`visible`), in code font, and as
    nothing else: no link, image, emphasis, icon, emoji or math. ``""`` renders as
    ``(empty)``."""
    text = visible(str(value))
    if not text:
        return "(empty)"
    fence = "`" * (max((len(m) for m in _BACKTICKS.findall(text)), default=0) + 1)
    pad = (
        text[0] == "`"
        or text[-1] == "`"
        or (text[0] == " " and text[-1] == " " and text.strip(" ") != "")
    )
    return f"{fence} {text} {fence}" if pad else f"{fence}{text}{fence}"


def md_plain(text: object) -> str:
    """Markdown that renders as the sentence ``text`` (:func:`visible`; leading and trailing
    spaces dropped, as markdown drops them): markdown characters escaped, words that could
    become a link, icon or directive in code font (:func:`md_literal`)."""
    parts = re.split(r"(\s+)", visible(str(text)).strip())
    out: list[str] = []
    for i, word in enumerate(parts):
        if i % 2 or not word:  # a run of spaces, or the empty text
            out.append(word)
        elif _LINKISH.search(word):
            out.append(md_literal(word))
        else:
            escaped = _SPECIAL.sub(r"\\\1", word)
            if i == 0:
                escaped = _BLOCK_START.sub(
                    lambda m: m.group(0)[:-1] + "\\" + m.group(0)[-1], escaped
                )
            out.append(escaped)
    return "".join(out)
