"""How a tensor is put on an integer grid, as the cfg's quantize_method_* values name
it: per tensor or per channel, symmetric or not, the full or the restricted range.
A value is taken apart once, where the cfg or an opt_config is read."""


class SettingValue(str):
    """A setting's text together with what it says, taken apart once: an immutable
    value, which copies of a graph (and of its settings) share."""

    def __copy__(self):
        return self

    def __deepcopy__(self, _memo):
        return self


class QuantMethod(SettingValue):
    """A quantize_method_* value and what it says; it is its text, too (templates and
    the Compass Optimizer's q_mode_* attrs show it as such)."""
    per_channel: bool
    symmetric: bool
    full_range: bool

    def __new__(cls, text: str):
        if isinstance(text, QuantMethod):
            return text
        self = super().__new__(cls, str(text).strip().lower())
        self.per_channel = self.startswith("per_channel")
        self.symmetric = "_symmetric" in self
        self.full_range = "restricted" not in self
        return self

    def __getnewargs__(self):
        return (str(self),)

    def to_symmetric(self) -> "QuantMethod":
        """The symmetric method of the same granularity (restricted range), as the tool
        chain's QuantMode.to_symmetric names it."""
        if self.symmetric:
            return self
        return QuantMethod(self.split("_asymmetric")[0] + "_symmetric_restricted_range")
