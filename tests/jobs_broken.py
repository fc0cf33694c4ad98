"""A job module that fails at import (not with ImportError): the checks report it."""

raise RuntimeError("this module fails at import")
