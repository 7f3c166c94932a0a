"""Errors karpy reports to its users."""

from __future__ import annotations

from dataclasses import dataclass

# characters that end a line for str.splitlines(): an error is one line, whatever a key or value holds
_LINE_BREAKS = {c: f"\\u{c:04x}" if c > 0xff else f"\\x{c:02x}"
                for c in (0x0a, 0x0b, 0x0c, 0x0d, 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029)}


@dataclass
class FieldError:
    """One invalid field of one input document."""

    file: str
    index: int | None  # position of the document in its file, from 0
    kind: str | None
    name: str | None
    field: str  # dotted path, e.g. spec.template.spec.requirements[0].operator
    message: str

    def __str__(self) -> str:
        where = self.file
        if self.index is not None:
            doc = f"document {self.index}"
            if self.kind:
                doc += f" ({self.kind}/{self.name or '<unnamed>'})"
            where += f": {doc}"
        if self.field:
            where += f": {self.field}"
        return f"{where}: {self.message}".translate(_LINE_BREAKS)


class InputError(Exception):
    """Invalid user input; the CLI prints every field error and exits 2."""

    def __init__(self, errors: list[FieldError] | FieldError):
        if isinstance(errors, FieldError):
            errors = [errors]
        self.errors = list(errors)
        super().__init__("\n".join(str(e) for e in self.errors))


class FieldProblem(ValueError):
    """Raised by parsers that know the field but not the document; callers add the location."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)
