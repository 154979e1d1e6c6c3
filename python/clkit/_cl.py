"""The few OpenCL calls the package needs, through the ICD loader (libOpenCL.so.1) by ctypes:
buffers to hold NumPy data on the device, and reads and writes. libclkit links the same
loader, so these handles are the ones libclkit uses."""
import ctypes
import ctypes.util

CL_SUCCESS = 0
CL_TRUE = 1
CL_MEM_READ_WRITE = 1 << 0
CL_MEM_SIZE = 0x1102

_ERRORS = {
    -4: "CL_MEM_OBJECT_ALLOCATION_FAILURE", -5: "CL_OUT_OF_RESOURCES",
    -6: "CL_OUT_OF_HOST_MEMORY", -30: "CL_INVALID_VALUE", -34: "CL_INVALID_CONTEXT",
    -36: "CL_INVALID_COMMAND_QUEUE", -38: "CL_INVALID_MEM_OBJECT",
    -61: "CL_INVALID_BUFFER_SIZE",
}

_cl = None


def load():
    global _cl
    if _cl is not None:
        return _cl
    names = ["libOpenCL.so.1"]
    found = ctypes.util.find_library("OpenCL")
    if found:
        names.append(found)
    err = None
    for n in names:
        try:
            cl = ctypes.CDLL(n)
            break
        except OSError as e:
            err = e
    else:
        raise OSError("the OpenCL ICD loader (libOpenCL.so.1) could not be loaded: %s" % err)
    vp, sz, i32 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int32
    cl.clCreateBuffer.restype = vp
    cl.clCreateBuffer.argtypes = [vp, ctypes.c_uint64, sz, vp, ctypes.POINTER(i32)]
    for f in (cl.clEnqueueWriteBuffer, cl.clEnqueueReadBuffer):
        f.restype = i32
        f.argtypes = [vp, vp, ctypes.c_uint32, sz, sz, vp, ctypes.c_uint32, vp, vp]
    cl.clReleaseMemObject.restype = i32
    cl.clReleaseMemObject.argtypes = [vp]
    cl.clGetMemObjectInfo.restype = i32
    cl.clGetMemObjectInfo.argtypes = [vp, ctypes.c_uint32, sz, vp, ctypes.POINTER(sz)]
    cl.clWaitForEvents.restype = i32
    cl.clWaitForEvents.argtypes = [ctypes.c_uint32, ctypes.POINTER(vp)]
    cl.clReleaseEvent.restype = i32
    cl.clReleaseEvent.argtypes = [vp]
    _cl = cl
    return cl


class CLError(RuntimeError):
    """An OpenCL call made by the Python package itself failed."""

    def __init__(self, call, code):
        self.call, self.code = call, code
        super().__init__("%s failed: %s (%d)" % (call, _ERRORS.get(code, "OpenCL error"), code))


def create_buffer(context, nbytes):
    err = ctypes.c_int32(0)
    mem = load().clCreateBuffer(context, CL_MEM_READ_WRITE, max(int(nbytes), 1), None,
                                ctypes.byref(err))
    if not mem:
        raise CLError("clCreateBuffer(%d bytes)" % nbytes, err.value)
    return mem


def write(queue, mem, offset, nbytes, host_ptr):
    """Blocking copy of nbytes from host_ptr (an address) to mem at offset."""
    if nbytes == 0:
        return
    e = load().clEnqueueWriteBuffer(queue, mem, CL_TRUE, offset, nbytes, host_ptr, 0, None, None)
    if e != CL_SUCCESS:
        raise CLError("clEnqueueWriteBuffer", e)


def read(queue, mem, offset, nbytes, host_ptr):
    """Blocking copy of nbytes from mem at offset to host_ptr (waits for earlier commands of
    the in-order queue)."""
    if nbytes == 0:
        return
    e = load().clEnqueueReadBuffer(queue, mem, CL_TRUE, offset, nbytes, host_ptr, 0, None, None)
    if e != CL_SUCCESS:
        raise CLError("clEnqueueReadBuffer", e)


def release(mem):
    if mem:
        load().clReleaseMemObject(mem)


def buffer_size(mem):
    size = ctypes.c_size_t(0)
    e = load().clGetMemObjectInfo(mem, CL_MEM_SIZE, ctypes.sizeof(size), ctypes.byref(size), None)
    if e != CL_SUCCESS:
        raise CLError("clGetMemObjectInfo", e)
    return size.value


class Event:
    """A cl_event the package owns (clkit_enqueue_marker's): wait() for it, pass it to
    Context.wait_events or to another queue's wait list as int_ptr; released with the object
    or by release()."""

    def __init__(self, handle):
        self.int_ptr = handle

    def wait(self):
        """clWaitForEvents on this event."""
        h = ctypes.c_void_p(self.int_ptr)
        e = load().clWaitForEvents(1, ctypes.byref(h))
        if e != CL_SUCCESS:
            raise CLError("clWaitForEvents", e)

    def release(self):
        """clReleaseEvent. Idempotent."""
        if self.int_ptr:
            load().clReleaseEvent(self.int_ptr)
        self.int_ptr = 0

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass

    def __repr__(self):
        if not self.int_ptr:
            return "<clkit cl_event released>"
        return "<clkit cl_event 0x%x>" % self.int_ptr
