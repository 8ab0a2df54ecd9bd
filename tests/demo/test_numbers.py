import pytest

from transduce.demo.numbers import english, german, splits

KNOWN = {
    0: ("zero", "null"),
    1: ("one", "eins"),
    7: ("seven", "sieben"),
    16: ("sixteen", "sechzehn"),
    17: ("seventeen", "siebzehn"),
    21: ("twenty-one", "einundzwanzig"),
    30: ("thirty", "dreißig"),
    57: ("fifty-seven", "siebenundfünfzig"),
    100: ("one hundred", "einhundert"),
    101: ("one hundred one", "einhunderteins"),
    111: ("one hundred eleven", "einhundertelf"),
    1000: ("one thousand", "eintausend"),
    1001: ("one thousand one", "eintausendeins"),
    21000: ("twenty-one thousand", "einundzwanzigtausend"),
    101000: ("one hundred one thousand", "einhunderteintausend"),
    321405: ("three hundred twenty-one thousand four hundred "
             "five", "dreihunderteinundzwanzigtausendvierhundertfünf"),
    999999: ("nine hundred ninety-nine thousand nine hundred ninety-nine",
             "neunhundertneunundneunzigtausendneunhundertneunundneunzig"),
}


@pytest.mark.parametrize("n", sorted(KNOWN))
def test_known_numbers(n):
    assert (english(n), german(n)) == KNOWN[n]


def test_range_is_checked():
    with pytest.raises(ValueError, match="outside"):
        german(1_000_000)


def test_splits_are_disjoint_and_cover_the_small_numbers():
    s = splits(3000, 200, 300)
    train, valid, test = (set(s[k]) for k in ("train", "valid", "test"))
    assert len(train) == 3000 and len(valid) == 200 and len(test) == 300
    assert not (train & valid) and not (train & test) and not (valid & test)
    assert set(range(1000)) <= train
