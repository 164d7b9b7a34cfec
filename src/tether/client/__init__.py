"""The Python SDK: :class:`~tether.client.sync.Client` and
:class:`~tether.client.aio.AsyncClient`. The CLI is built on ``Client``."""
