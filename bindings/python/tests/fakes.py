"""Stand-ins for device tensors and contexts, so argument checks run without a GPU."""


class FakeDeviceArray:
    """Anything with __cuda_array_interface__ (the pointer is never dereferenced by these tests)."""

    _next_pointer = 0x7F0000000000

    def __init__(self, shape, typestr, strides=None, pointer=None, readonly=False):
        if pointer is None:
            pointer = FakeDeviceArray._next_pointer
            FakeDeviceArray._next_pointer += 1 << 20
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (pointer, readonly),
                                         "strides": strides, "version": 3}


class FakeTorchDevice:
    def __init__(self, index):
        self.type, self.index = "cuda", index


class FakeTorchTensor(FakeDeviceArray):
    """Looks like a torch CUDA tensor to the binding's device check."""

    def __init__(self, shape, typestr, device_index):
        super().__init__(shape, typestr)
        self.device = FakeTorchDevice(device_index)


FakeTorchTensor.__module__ = "torch.fake"


class RecordingContext:
    """Takes the place of a Context: records the calls that got through the binding's checks."""

    def __init__(self, device=0):
        self.device = device
        self.handle = 0
        self.calls = []

    def call(self, function, *args):
        self.calls.append((function, args))

    def adopt(self, child):
        pass
