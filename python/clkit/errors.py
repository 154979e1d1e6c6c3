"""clkit.Error and one subclass per clkit_status.

A call that returns a status other than CLKIT_OK raises the subclass of its status, carrying
the status name, clkit_status_string's text and clkit_last_error(ctx):

    clkit.ShapeError: clkit_add: CLKIT_ERR_SHAPE (bad or mismatched shape): x (2,3) and
    y (3,2) differ in shape

Where a built-in exception means the same thing, the subclass derives from it as well
(ShapeError is also a ValueError, DtypeError a TypeError), so generic handlers catch them.
The checks the Python layer makes itself (a NumPy dtype with no clkit dtype, more than four
dimensions) raise the same classes with the same status.
"""
from . import _lib


class Error(Exception):
    """A clkit call failed.

    status       the clkit_status value (int)
    status_name  its enum name, e.g. "CLKIT_ERR_SHAPE"
    status_text  clkit_status_string(status), e.g. "bad or mismatched shape"
    detail       clkit_last_error(ctx) at the time of failure ("" if none)
    function     the C function (or Python method) that failed
    """

    status = None

    def __init__(self, status, detail="", function=""):
        self.status = int(status)
        self.status_name = (_lib.STATUS_NAMES[self.status]
                            if 0 <= self.status < len(_lib.STATUS_NAMES) else "CLKIT_STATUS_%d" % self.status)
        self.status_text = status_string(self.status)
        self.detail = detail or ""
        self.function = function or ""
        msg = "%s (%s)" % (self.status_name, self.status_text)
        if self.function:
            msg = "%s: %s" % (self.function, msg)
        if self.detail:
            # clkit_last_error starts with the status text ("bad or mismatched shape: x ...")
            d = self.detail
            if d.startswith(self.status_text + ": "):
                d = d[len(self.status_text) + 2:]
            msg += ": " + d
        super().__init__(msg)

    def __reduce__(self):
        return (error_for, (self.status, self.detail, self.function))


def status_string(status):
    """clkit_status_string(status), or a fallback when the library is not loaded."""
    try:
        s = _lib.load().clkit_status_string(int(status))
        return s.decode() if s else "unknown status"
    except OSError:
        return "status %d" % int(status)


class NullArgumentError(Error, ValueError):
    """CLKIT_ERR_NULL_ARGUMENT: a required pointer (context, tensor, buffer) is NULL."""


class InvalidValueError(Error, ValueError):
    """CLKIT_ERR_INVALID_VALUE: a scalar argument out of range (p, eps, group_size, ...)."""


class DtypeError(Error, TypeError):
    """CLKIT_ERR_DTYPE: dtype not supported by the op, or mismatched."""


class NdimError(Error, ValueError):
    """CLKIT_ERR_NDIM: ndim outside 1..4 or not what the op takes."""


class ShapeError(Error, ValueError):
    """CLKIT_ERR_SHAPE: negative, or mismatched between tensors."""


class StrideError(Error, ValueError):
    """CLKIT_ERR_STRIDE: misaligned offset, output self-overlap."""


class OutOfBoundsError(Error, IndexError):
    """CLKIT_ERR_OUT_OF_BOUNDS: the view reaches past the end of its buffer."""


class OverlapError(Error, ValueError):
    """CLKIT_ERR_OVERLAP: an output overlaps an input where the op forbids it."""


class SizeOverflowError(Error, OverflowError):
    """CLKIT_ERR_OVERFLOW: element or byte count overflows 64-bit arithmetic."""


class NoDeviceError(Error):
    """CLKIT_ERR_NO_DEVICE: no OpenCL platform/device matches."""


class BuildError(Error):
    """CLKIT_ERR_BUILD: a kernel failed to compile (the build log is in detail)."""


class OpenCLError(Error):
    """CLKIT_ERR_OPENCL: an OpenCL call failed (the code is in detail)."""


class OutOfMemoryError(Error, MemoryError):
    """CLKIT_ERR_OUT_OF_MEMORY: host or device allocation failed."""


class UnsupportedError(Error):
    """CLKIT_ERR_UNSUPPORTED: the device lacks a feature the op needs."""


class FileIOError(Error, OSError):
    """CLKIT_ERR_IO: a file (cache, export) could not be read or written."""

    def __init__(self, status, detail="", function=""):
        Error.__init__(self, status, detail, function)

    def __str__(self):
        return self.args[0] if self.args else ""


_BY_STATUS = {
    1: NullArgumentError, 2: InvalidValueError, 3: DtypeError, 4: NdimError, 5: ShapeError,
    6: StrideError, 7: OutOfBoundsError, 8: OverlapError, 9: SizeOverflowError,
    10: NoDeviceError, 11: BuildError, 12: OpenCLError, 13: OutOfMemoryError,
    14: UnsupportedError, 15: FileIOError,
}
for _s, _c in _BY_STATUS.items():
    _c.status = _s


def error_for(status, detail="", function=""):
    """The Error (subclass) instance for a status."""
    return _BY_STATUS.get(int(status), Error)(status, detail, function)

for _c in (Error, *_BY_STATUS.values()):
    _c.__module__ = "clkit"  # shown as clkit.ShapeError in tracebacks
