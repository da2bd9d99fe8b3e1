"""Record a real llama.cpp server's answers for the default suite: ``.venv/bin/python tests/record_served.py``.

Starts llama-cpp-python's server on 127.0.0.1 with the SmolLM2 GGUF (``make served-model`` installs both), runs the
client's alignment self-test and scores one passage through it, and writes every request and answer to
``tests/data/served/llama_cpp_smollm2.json`` with the token ids the local tokenizer gave. ``test_served.py`` replays
them: the client is tested on what the real server said, not on answers written by hand.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from lmaudit.models.loading import load_model  # noqa: E402
from lmaudit.models.served import PROBE_TEXT, Endpoint, check_alignment, prompt_logprobs  # noqa: E402
from served_server import MODEL, available, llama_server  # noqa: E402

OUT = HERE / "data" / "served" / "llama_cpp_smollm2.json"
PASSAGE = "Return the sum of the elements of the array over the given axis, treating missing values as zero."


class Recording(Endpoint):
    """An endpoint that keeps every request it sends and the answer it gets."""

    log: list

    def _request(self, path, body):
        answer = super()._request(path, body)
        self.log.append({"path": path, "body": body, "answer": answer})
        return answer


def main() -> None:
    why = available()
    if why:
        raise SystemExit(why)
    tokenizer = load_model(MODEL).tokenizer
    bos = tokenizer.bos_token_id
    bos_text = tokenizer.convert_ids_to_tokens(bos)
    with llama_server() as url:
        endpoint = Recording(url, model=MODEL, cache=False)
        endpoint.log = []
        models = endpoint.models()
        found = check_alignment(endpoint, tokenizer, bos)
        ids = tokenizer(PASSAGE, add_special_tokens=False)["input_ids"]
        scored = prompt_logprobs(endpoint, PASSAGE, bos_text=bos_text, top_k=5, n_tokens=len(ids))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    record = {"server": "llama-cpp-python", "model": MODEL, "models": models, "bos_id": bos, "bos_text": bos_text,
              "probe": {"text": PROBE_TEXT, "ids": tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"]},
              "passage": {"text": PASSAGE, "ids": ids, "logprobs": scored.logprobs},
              "alignment": found.as_dict(), "exchanges": endpoint.log}
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{OUT}: {len(endpoint.log)} exchanges; alignment {found.as_dict()}")


if __name__ == "__main__":
    main()
