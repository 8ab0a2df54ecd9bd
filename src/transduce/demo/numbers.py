"""The built-in task: English number words -> German number words, 0 .. 999,999.

"three hundred twenty-one thousand four hundred five" ->
"dreihunderteinundzwanzigtausendvierhundertfünf"

German writes a number below a million as one word, puts units before tens joined by "und"
(einundzwanzig: "one-and-twenty"), and uses "ein" for one inside a compound but "eins" at the
end (einhunderteins = 101). That reordering is why the demo's cross-attention picture shows a
crossing. We write 100 as "einhundert" and 1000 as "eintausend" (both forms are correct; the
explicit one keeps the mapping regular).
"""

from __future__ import annotations

import random

EN_ONES = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
EN_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
DE_ONES = [
    "null",
    "eins",
    "zwei",
    "drei",
    "vier",
    "fünf",
    "sechs",
    "sieben",
    "acht",
    "neun",
    "zehn",
    "elf",
    "zwölf",
    "dreizehn",
    "vierzehn",
    "fünfzehn",
    "sechzehn",
    "siebzehn",
    "achtzehn",
    "neunzehn",
]
DE_TENS = [
    "",
    "",
    "zwanzig",
    "dreißig",
    "vierzig",
    "fünfzig",
    "sechzig",
    "siebzig",
    "achtzig",
    "neunzig",
]
LIMIT = 1_000_000


def english(n: int) -> str:
    """American English words without "and": 105 -> "one hundred five", 21 -> "twenty-one"."""
    _check(n)
    if n == 0:
        return "zero"
    thousands, rest = divmod(n, 1000)
    parts = []
    if thousands:
        parts += [_english_below_1000(thousands), "thousand"]
    if rest:
        parts.append(_english_below_1000(rest))
    return " ".join(parts)


def _english_below_1000(n: int) -> str:
    hundreds, rest = divmod(n, 100)
    parts = []
    if hundreds:
        parts += [EN_ONES[hundreds], "hundred"]
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        parts.append(EN_TENS[tens] + (f"-{EN_ONES[ones]}" if ones else ""))
    elif rest:
        parts.append(EN_ONES[rest])
    return " ".join(parts)


def german(n: int) -> str:
    """German orthography, one word: 21 -> "einundzwanzig", 101 -> "einhunderteins"."""
    _check(n)
    if n == 0:
        return "null"
    thousands, rest = divmod(n, 1000)
    word = ""
    if thousands:
        word += _german_below_1000(thousands, final=False) + "tausend"
    if rest:
        word += _german_below_1000(rest, final=True)
    return word


def _german_below_1000(n: int, final: bool) -> str:
    """``final``: the number ends the word, so 1 is "eins"; before "tausend" it is "ein"."""
    hundreds, rest = divmod(n, 100)
    word = (("ein" if hundreds == 1 else DE_ONES[hundreds]) + "hundert") if hundreds else ""
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        word += (("ein" if ones == 1 else DE_ONES[ones]) + "und" if ones else "") + DE_TENS[tens]
    elif rest == 1:
        word += "eins" if final else "ein"
    elif rest:
        word += DE_ONES[rest]
    return word


def _check(n: int) -> None:
    if not 0 <= n < LIMIT:
        raise ValueError(f"{n} is outside 0 .. {LIMIT - 1:,}")


def splits(train: int, valid: int, test: int, seed: int = 1) -> dict[str, list[int]]:
    """Disjoint random numbers for each split; small numbers (< 1000) are all in training, so
    every word the task uses is seen there."""
    rng = random.Random(seed)
    small = list(range(1000))
    held_out = rng.sample(range(1000, LIMIT), valid + test)
    pool = set(held_out)
    large = []
    while len(large) < max(0, train - len(small)):
        n = rng.randrange(1000, LIMIT)
        if n not in pool:
            pool.add(n)
            large.append(n)
    train_numbers = small + large
    rng.shuffle(train_numbers)
    return {"train": train_numbers, "valid": held_out[:valid], "test": held_out[valid:]}
