#!/usr/bin/env python3
"""Random inputs for the Python side's readers of text: the vLLM plugin's environment (settings.read,
settings.max_tokens_override: volt8/_environment.py), its MTP layer names (settings.mtp_layer) and the
binding's digit reader (volt8._integers.digits), each against a reading of its grammar of its own.
libFuzzer fuzzes the library's readers (fuzz_environment.c); these are Python, so they get this loop:
texts mutated from seeds with ASCII and other Unicode digits, spaces, signs, newlines, case changes
and long runs of digits.

Invariants: a value the docs list is taken and any other text refused with a ValueError naming the
variable; a number is ASCII digits alone without a leading zero, in range (never int()'s digit-limit
ValueError, never another exception); a layer name is an MTP layer exactly when its number reads so.

Usage: tests/fuzz/fuzz_python_readers.py [-t SECONDS] [--seed N]   (the binding on PYTHONPATH)
Prints the inputs tried and any finding; exit 1 on a finding. test_fuzz_python_readers.py runs a few
thousand of them in make test.
"""
import argparse
import random
import re
import sys
import time

from volt8._integers import digits
from volt8.vllm import settings

DIGITS = "0123456789"
OTHER_DIGITS = "\u0660\u0663\u06f5\u0966\u09e7\uff11\u00b2\u00b9\u2463\U0001d7ce"  # Arabic-Indic, fullwidth, superscripts...
NOISE = [" ", "\t", "\n", "\r", "+", "-", "_", ".", "e", "x", "\x00", "\u00a0", "\u2009", "0", "00"]
SEEDS_ENABLE = ["", "0", "1", "force", "on", "ON", "Force", " 1", "1 ", "true", "off", "FORCE", "01"]
SEEDS_NUMBER = ["1", "12", "512", "0", "012", "1073741824", "1073741825", "9" * 30, " 12", "+12", "-1", "1e3"]
SEEDS_LAYER = ["mtp.layers.0.mlp.experts", "model.layers.61.mlp.experts", "model.layers.62.mlp.experts",
               "mtp.layers.3.mlp.experts", "model.layers.61.mlp.shared_experts", "layers.7.mlp.experts"]


def mutate(rng, text):
    """One to four edits of `text`: a character inserted, deleted or replaced, case flipped, a long run."""
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        at = rng.randint(0, len(text))
        if choice < 0.3:
            piece = rng.choice([rng.choice(DIGITS), rng.choice(OTHER_DIGITS), rng.choice(NOISE)])
            text = text[:at] + piece + text[at:]
        elif choice < 0.45 and text:
            text = text[:at] + text[at + 1:]
        elif choice < 0.6 and text:
            at = min(at, len(text) - 1)
            text = text[:at] + rng.choice(DIGITS + OTHER_DIGITS) + text[at + 1:]
        elif choice < 0.7:
            text = text.swapcase()
        elif choice < 0.75:
            text = text[:at] + rng.choice(DIGITS[1:]) + rng.choice(DIGITS) * rng.choice([10, 400, 5000]) + text[at:]
        else:
            text = text[:at] + rng.choice(NOISE) + text[at:]
    return text


def grammar_number(text, high):
    """The number `text` is, written as the docs say (ASCII digits alone, no leading zero), in 1..high."""
    if not re.fullmatch(r"[1-9][0-9]*", text, flags=re.ASCII) or len(text) > len(str(high)):
        return None
    return int(text) if int(text) <= high else None


def check_enable(text):
    environ = {"VOLT8_VLLM": text}
    documented = text in ("", "0", "1", "force")
    try:
        result = settings.read(environ)
    except ValueError as error:
        if documented or "VOLT8_VLLM=" not in str(error):
            return f"VOLT8_VLLM={text!r}: refused ({error})"
        return None
    if not documented:
        return f"VOLT8_VLLM={text!r}: taken as {result}"
    if result.enabled != (text in ("1", "force")) or result.force != (text == "force"):
        return f"VOLT8_VLLM={text!r}: read as {result}"
    return None


def check_online(text):
    for variable, documented, base in (("VOLT8_VLLM_ONLINE", ("", "fp8"), {}),
                                       ("VOLT8_VLLM_ONLINE_BLOCK", ("", "1", "128"), {"VOLT8_VLLM_ONLINE": "fp8"})):
        environ = dict(base, **{variable: text})
        try:
            result = settings.read(environ)
        except ValueError as error:
            if text in documented or f"{variable}=" not in str(error):
                return f"{variable}={text!r}: refused ({error})"
            continue
        if text not in documented:
            return f"{variable}={text!r}: taken as {result}"
    return None


def check_max_tokens(text):
    expected = grammar_number(text, 1 << 30)
    try:
        got = settings.max_tokens_override({"VOLT8_VLLM_MAX_TOKENS": text})
    except ValueError as error:
        if expected is not None or not str(error).startswith("VOLT8_VLLM_MAX_TOKENS="):
            return f"VOLT8_VLLM_MAX_TOKENS={text[:60]!r}: refused ({str(error)[:200]})"
        return None
    if text == "":
        return None if got is None else f"VOLT8_VLLM_MAX_TOKENS='': read as {got}"
    if got != expected:
        return f"VOLT8_VLLM_MAX_TOKENS={text[:60]!r}: read as {got}, the grammar reads {expected}"
    return None


def check_digits(text):
    expected = 0 if text == "0" else grammar_number(text, 10**6)
    got = digits(text, 0, 10**6)
    return None if got == expected else f"digits({text[:60]!r}) = {got}, the grammar reads {expected}"


def check_layer(text, layers):
    got = settings.mtp_layer(text, layers)
    spelled = re.fullmatch(r"(?:.*\.)?mtp\.layers\.(0|[1-9][0-9]*)\.mlp\.experts", text, flags=re.ASCII | re.DOTALL)
    numbered = re.fullmatch(r"(?:.*\.)?layers\.(0|[1-9][0-9]*)\.mlp\.experts", text, flags=re.ASCII | re.DOTALL)
    expected = None
    if spelled and len(spelled.group(1)) <= 7 and int(spelled.group(1)) <= 10**6:
        expected = int(spelled.group(1))
    elif not spelled and numbered and len(numbered.group(1)) <= 7 and int(numbered.group(1)) <= 10**6:
        number = int(numbered.group(1))
        expected = number - layers if number >= layers else None
    return None if got == expected else f"mtp_layer({text[:80]!r}, {layers}) = {got}, the grammar reads {expected}"


def one(rng):
    """One random input to every reader; the first finding, or None."""
    findings = [check_enable(mutate(rng, rng.choice(SEEDS_ENABLE))),
                check_online(mutate(rng, rng.choice(["fp8", "1", "128", ""]))),
                check_max_tokens(mutate(rng, rng.choice(SEEDS_NUMBER))),
                check_digits(mutate(rng, rng.choice(SEEDS_NUMBER))),
                check_layer(mutate(rng, rng.choice(SEEDS_LAYER)), rng.choice([0, 46, 61, 92]))]
    return next((finding for finding in findings if finding), None)


def run(seconds=None, count=None, seed=1):
    """(inputs tried, findings) over `seconds` or `count` rounds of five inputs each."""
    rng = random.Random(seed)
    end = time.monotonic() + seconds if seconds else None
    tried, findings = 0, []
    while (count is None or tried < count) and (end is None or time.monotonic() < end):
        try:
            finding = one(rng)
        except Exception as error:  # noqa: BLE001 - any other exception is a finding
            finding = f"{type(error).__name__}: {error}"
        tried += 1
        if finding:
            findings.append(finding)
            if len(findings) >= 20:
                break
    return tried * 5, findings


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-t", type=float, default=60, help="seconds (default 60)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    tried, findings = run(seconds=args.t, seed=args.seed)
    for finding in findings:
        print("finding:", finding)
    print(f"python_readers: {tried} inputs in {args.t:.0f} s, {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
