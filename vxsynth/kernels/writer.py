"""A tiny indented line writer: what every part of the emitter writes kernel source through."""

from __future__ import annotations


class Writer:
    """A tiny indented line writer."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ind = 0

    def __call__(self, text: str = "") -> None:
        for line in text.splitlines() or [""]:
            self.lines.append(("    " * self.ind + line) if line else "")

    def open(self, text: str) -> None:
        self(text + " {")
        self.ind += 1

    def block(self) -> None:
        self("{")
        self.ind += 1

    def close(self, text: str = "}") -> None:
        self.ind -= 1
        self(text)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"
