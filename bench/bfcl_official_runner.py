"""Run BFCL's official AST checker over recorded answers; executed by the python of a venv that holds
the official ``bfcl-eval`` (``bench.bfcl_checker_agreement`` makes one), never imported by Evolve.

Usage: ``python bfcl_official_runner.py ANSWERS.jsonl VERDICTS.json``. Each answer's ``model_output``
goes through BFCL's own evaluation steps for an AST entry: the output-format check, then ``ast_checker``
with the Python language, the answer's category and a prompting model whose function names keep their
dots. An exception from the checker is recorded as such (and counts as not valid). Each answer's
``model_text`` is also decoded by BFCL's decoder for prompting models, to compare with ``model_output``.
"""

from __future__ import annotations

import json
import sys
import traceback
from importlib.metadata import version
from typing import Any

from bfcl_eval.constants.enums import Language, ReturnFormat
from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
from bfcl_eval.model_handler.utils import default_decode_ast_prompting
from bfcl_eval.utils import is_function_calling_format_output

MODEL = "gpt-4o-2024-11-20"  # BFCL's prompt-mode GPT-4o: underscore_to_dot=False, names compared as written


def verdict(answer: dict[str, Any]) -> dict[str, Any]:
    output = answer["model_output"]
    if not is_function_calling_format_output(output):
        return {
            "valid": False,
            "error": ["Did not output in the specified format."],
            "error_type": "ast_decoder:decoder_wrong_output_format",
        }
    try:
        result = ast_checker(
            answer["functions"], output, answer["ground_truth"], Language.PYTHON, answer["category"], MODEL
        )
    except Exception as e:  # the official checker has inputs it does not survive; record them
        return {
            "valid": False,
            "error": [f"{type(e).__name__}: {e}"],
            "error_type": "checker_raised",
            "trace": traceback.format_exc()[-600:],
        }
    return {
        "valid": bool(result["valid"]),
        "error": result.get("error", []),
        "error_type": result.get("error_type", ""),
    }


def decoded(answer: dict[str, Any]) -> Any:
    try:
        calls = default_decode_ast_prompting(answer["model_text"], ReturnFormat.PYTHON)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return json.loads(json.dumps(calls))  # tuples as lists, as in the recorded output


def main(src: str, dst: str) -> None:
    with open(src, encoding="utf-8") as f:
        answers = [json.loads(line) for line in f if line.strip()]
    out = []
    for answer in answers:
        row = {"id": answer["id"], **verdict(answer)}
        if "model_text" in answer:
            row["bfcl_decodes_text"] = decoded(answer) == answer["model_output"]
        out.append(row)
    with open(dst, "w", encoding="utf-8") as f:
        json.dump({"bfcl_eval_version": version("bfcl-eval"), "model_name": MODEL, "verdicts": out}, f, default=str)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
