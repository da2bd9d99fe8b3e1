"""Where a model card goes in a file: its own section, between its begin and end lines, and nothing else.

The section :func:`~lmaudit.runs.card.card` makes opens with a line that starts ``<!-- lmaudit card: begin`` and
closes with the line ``<!-- lmaudit card: end -->`` (HTML comments: a Markdown renderer shows neither). Writing the
card to a file (:func:`place`):

- a new file gets the metadata (a YAML front-matter block whose first line is the comment :data:`FRONT_TAG`) and the
  section;
- a file with one begin line and one end line after it (a README the section was pasted into) gets the text from
  the begin line to the end line replaced by the new section; every other byte is kept, and the section takes the
  file's line endings;
- a file with neither line gets the section appended after a blank line, the rest kept;
- a file whose lines are broken (one of them missing, either repeated, or the end before the begin), or that is not
  UTF-8 text, is refused and left as it is.

The metadata is written into a front-matter block only when lmaudit wrote that block (its first line is
:data:`FRONT_TAG`): a README's own front matter is never changed (merge the ``model-index`` key into it by hand).

What a user named goes inside the begin line's comment escaped (:func:`comment_text`), and no text of the section
can open a comment of its own (:func:`inert`): a folder named ``x-->`` cannot end the comment early, nor a record id
holding ``<!-- lmaudit card: end -->`` add an end line.
"""

from __future__ import annotations

import re

from lmaudit.errors import LmauditError

BEGIN = "<!-- lmaudit card: begin"  # the first line of the section starts with this
END = "<!-- lmaudit card: end -->"  # its last line is this
FRONT_TAG = "# lmaudit card: model-card metadata (replaced when lmaudit card writes this file again)"
_BEGIN_LINE = re.compile(r"^[ \t]*" + re.escape(BEGIN) + r".*$", re.MULTILINE)
_END_LINE = re.compile(r"^[ \t]*" + re.escape(END) + r"[ \t\r]*$", re.MULTILINE)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def comment_text(text) -> str:
    """``text`` safe inside an HTML comment on one line: ``&``, ``<`` and ``>`` as entities, no ``--`` left (each
    hyphen followed by another as ``&#45;``) and control characters (line breaks) as numeric entities."""
    text = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = re.sub(r"-(?=-)", "&#45;", text)
    return _CONTROL.sub(lambda m: f"&#{ord(m.group())};", text)


def inert(text: str) -> str:
    """``text`` (Markdown) with every ``<!--`` written ``&lt;!--``: it opens no comment, so no text of the section
    hides the rest of it or reads as one of its marker lines."""
    return text.replace("<!--", "&lt;!--")


def begin_line(version: str, folders: list[str]) -> str:
    """The section's first line, naming the folders its figures come from."""
    named = ", ".join(comment_text(f) for f in folders)
    return (f"{BEGIN} (written by lmaudit {comment_text(version)} from {named}; every figure is copied from those "
            "folders; lmaudit card --out replaces the lines from here to the end line and keeps the rest of the "
            "file) -->")


def _own_front_matter(text: str, where: str) -> int:
    """The length of the front-matter block lmaudit wrote at the start of ``text`` (0 when there is none)."""
    if not text.startswith("---\n" + FRONT_TAG + "\n"):
        return 0
    close = text.find("\n---\n", 4)
    if close < 0:
        raise LmauditError(f"{where}: its lmaudit front matter has no closing '---' line: the file is left as it is",
                           hint="close the block with a line '---', or remove it")
    return close + len("\n---\n")


def _section_span(text: str, where: str) -> tuple[int, int] | None:
    """(start, end) of the section's lines in ``text`` (the end line's line break left out); None without either
    marker line; broken markers refused."""
    begins, ends = list(_BEGIN_LINE.finditer(text)), list(_END_LINE.finditer(text))
    if not begins and not ends:
        return None
    if len(begins) == 1 and len(ends) == 1 and begins[0].start() < ends[0].start():
        end = ends[0].end()
        return begins[0].start(), end - 1 if text[end - 1:end] == "\r" else end
    if not begins or not ends:
        why = f"no '{BEGIN} … -->' line" if not begins else f"no '{END}' line"
    elif len(begins) > 1 or len(ends) > 1:
        why = f"{len(begins)} begin and {len(ends)} end lines"
    else:
        why = "its end line comes before its begin line"
    raise LmauditError(f"{where}: the lmaudit card's marker lines are broken ({why}): the file is left as it is",
                       hint=f"keep one line starting '{BEGIN}' and one line '{END}' after it around the section, or "
                            "remove both to have the section appended")


def place(existing: str | None, front_matter: str, section: str, where: str) -> tuple[str, str]:
    """(the file's new text, what was done): ``existing`` is the file's text (None: no file) and ``section`` the
    card's section, from its begin line to its end line and a line break (module docstring)."""
    if existing is None:
        return front_matter + "\n" + section, "written"
    own = _own_front_matter(existing, where)
    head, body = existing[:own], existing[own:]
    span = _section_span(body, where)
    newline = "\r\n" if "\r\n" in (body[span[0]:span[1] + 2] if span else body.split("\n", 1)[0] + "\n") else "\n"
    new = section.rstrip("\n").replace("\n", newline)
    if span is not None:
        body, done = body[:span[0]] + new + body[span[1]:], "section replaced"
    else:
        gap = "" if not body else newline if body.endswith("\n") else newline * 2
        body, done = body + gap + new + newline, "section appended"
    if own:
        return front_matter + body, done + "; metadata replaced"
    return head + body, done + "; metadata not written: add the model-index that `lmaudit card` prints to the file's " \
                               "front matter"
