"""A synthetic PII corpus: e-mail-like messages that carry names, e-mail addresses and phone numbers.

Each message wraps a passage of corpus prose (the docstring corpus) in headers and
a signature built from seeded Faker identities, in the shape of a work e-mail::

    From: Maria Lopez <maria.lopez@example.org>
    To: Tom Baker
    Subject: <first words of the passage>

    Hi Tom,
    <passage>
    Call me at 555-301-2288 if anything is unclear.
    Maria Lopez

The e-mail address is derived from the sender's name (as in real mail) and appears
once; the phone number appears once. Records carry ``text``, ``name``, ``email``
and ``phone``, so ``--mask pii:email`` finds the value in the text. Training and
unseen sets come from different corpus pools and different Faker seeds.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from lmaudit.data.corpus import Corpus, cut_at_word
from lmaudit.data.loaders import Record, TextSet
from lmaudit.utils import atomic_path, stable_seed

PII_FIELDS = ("name", "email", "phone")
_GREETINGS = ("Hi", "Hello", "Dear", "Hey")
_CLOSINGS = ("Call me at {phone} if anything is unclear.", "My direct line is {phone}.",
             "Reach me on {phone} this week.", "Phone: {phone}")


def _faker(seed: int):
    from faker import Faker  # a heavy dependency (its providers): imported when PII is first made

    fake = Faker("en_US")
    fake.seed_instance(seed)
    return fake


def _email_for(fake, first: str, last: str) -> str:
    user = fake.random_element([f"{first}.{last}", f"{first[0]}{last}", f"{first}{last[0]}", f"{first}_{last}"])
    return f"{re.sub(r'[^a-z._]', '', user.lower())}@{fake.free_email_domain()}"


def pii_messages(passages: list[str], *, seed: int, prefix: str = "p", source: str = "pii") -> TextSet:
    """One message per passage with a seeded identity; records keep ``name``, ``email``, ``phone``."""
    fake = _faker(stable_seed("pii", seed, prefix))
    records = []
    for i, passage in enumerate(passages):
        first, last = fake.first_name(), fake.last_name()
        name, email = f"{first} {last}", _email_for(fake, first, last)
        phone = fake.numerify("###-###-####")
        recipient = fake.first_name()
        subject = cut_at_word(passage, 40).rstrip(".,;:")
        closing = fake.random_element(_CLOSINGS).format(phone=phone)
        text = (f"From: {name} <{email}>\nTo: {recipient} {fake.last_name()}\nSubject: {subject}\n\n"
                f"{fake.random_element(_GREETINGS)} {recipient},\n{passage}\n{closing}\n{name}")
        records.append(Record(id=f"{prefix}{i}", target=text, fields={"name": name, "email": email, "phone": phone}))
    return TextSet(records, source=source)


def pii_corpus(corpus: Corpus, n_train: int, n_unseen: int, *, seed: int = 0,
               passage_chars: int = 200) -> tuple[TextSet, TextSet]:
    """(training messages from the member pool, unseen messages from the non-member pool)."""
    train = pii_messages(corpus.passages("member", n_train, max_chars=passage_chars, seed=seed),
                         seed=seed, prefix="t", source="pii:train")
    unseen = pii_messages(corpus.passages("nonmember", n_unseen, max_chars=passage_chars, seed=seed),
                          seed=seed + 10_000, prefix="u", source="pii:unseen")
    return train, unseen


def write_jsonl(textset: TextSet, path: str | Path) -> Path:
    """Write ``id``, ``text`` and the record's fields, one JSON object per line (atomically)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for r in textset.records:
            fh.write(json.dumps({"id": r.id, "text": r.text, **r.fields}, ensure_ascii=False) + "\n")
    return path
