"""refcomp's version, on the ground floor so the emitters can stamp it into generated source."""

__version__ = "0.1.0"
