"""Statuses become volt8.Error subclasses carrying the status and the library's message."""
import pytest

import volt8
from volt8.errors import ERROR_CLASSES, error_for_status


@pytest.mark.parametrize("status", list(volt8.Status)[1:], ids=lambda status: status.name)
def test_every_status_has_its_class(status):
    error = error_for_status(int(status), "the message", "volt8_something")
    assert isinstance(error, volt8.Error)
    assert type(error) is ERROR_CLASSES[status]
    assert error.status is status and error.message == "the message"
    assert str(error) == f"volt8_something: the message [VOLT8_{status.name}]"


def test_unknown_status_is_a_plain_error():
    error = error_for_status(77, "later status")
    assert type(error) is volt8.Error and error.status == 77


def test_python_base_classes():
    assert issubclass(volt8.InvalidArgumentError, ValueError)
    assert issubclass(volt8.OutOfMemoryError, MemoryError)
    assert issubclass(volt8.LibraryError, volt8.Error)


def test_context_create_failure_carries_the_thread_message():
    with pytest.raises(volt8.InvalidArgumentError) as caught:
        volt8.Context(device=None, target_arch="volta")
    assert caught.value.status == volt8.Status.ERR_INVALID_ARGUMENT
    assert 'target_arch "volta" is not of the form sm_XX' in caught.value.message
    assert caught.value.function == "volt8_ctx_create"


def test_cpu_context_works_and_gpu_calls_raise_no_device():
    with volt8.Context(device=None, target_arch="sm_70") as ctx:
        assert ctx.target_arch == "sm_70"
        assert not ctx.has_device
        with pytest.raises(volt8.NoDeviceError, match="without a device"):
            ctx.require_device()
        assert "without a device" in ctx.last_error
        with pytest.raises(volt8.NoDeviceError):
            volt8.Experts.load(ctx, "/nonexistent")


def test_library_message_for_a_missing_checkpoint(tmp_path):
    with pytest.raises(volt8.Error) as caught:
        volt8.plan(tmp_path / "missing", tp_size=1)
    assert caught.value.status in (volt8.Status.ERR_IO, volt8.Status.ERR_NOT_FOUND)
    assert "missing" in caught.value.message


def test_closed_objects_refuse_calls():
    ctx = volt8.Context(device=None)
    ctx.close()
    ctx.close()
    assert ctx.closed and "closed" in repr(ctx)
    with pytest.raises(volt8.InvalidArgumentError, match="closed"):
        ctx.target_arch


def test_device_arguments():
    from volt8.context import device_ordinal
    assert device_ordinal(None) == -1 and device_ordinal("cpu") == -1
    assert device_ordinal(2) == 2 and device_ordinal("cuda:1") == 1
    with pytest.raises(volt8.InvalidArgumentError):
        device_ordinal("tpu:0")
    with pytest.raises(volt8.InvalidArgumentError):
        device_ordinal(True)
