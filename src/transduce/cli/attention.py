"""placeholder"""


def add_parser(sub) -> None:
    p = sub.add_parser("attention")
    p.set_defaults(run=lambda args: 1)
