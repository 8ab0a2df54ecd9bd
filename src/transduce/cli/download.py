"""placeholder"""


def add_parser(sub) -> None:
    p = sub.add_parser("download")
    p.set_defaults(run=lambda args: 1)
