"""Environment variables that hold a number, read one way wherever volt8's Python reads one (the vLLM
plugin's VOLT8_VLLM_MAX_TOKENS): the text must be ASCII digits alone, no sign, space, newline or
leading zero, within the variable's range, as the library reads its own (VOLT8_SINGLE_LAUNCH_CTAS,
VOLT8_L2_WARM_BYTES); anything else is refused with a message naming the variable and its value.
Imports neither torch nor vLLM."""
import os

from ._integers import digits


def integer(variable, low, high, what, environ=None):
    """$variable as an int in low..high, or None when it is unset or empty; ValueError
    "VARIABLE='TEXT' is not WHAT in LOW..HIGH (...)" for any other text."""
    environ = os.environ if environ is None else environ
    text = environ.get(variable)
    if text is None or text == "":
        return None
    number = digits(text, low, high)
    if number is None:
        raise ValueError(f"{variable}={text!r} is not {what} in {low}..{high} (a whole number written in ASCII "
                         f"digits, without sign, space or leading zero)")
    return number
