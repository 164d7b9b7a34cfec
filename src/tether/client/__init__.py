"""The Python SDK: :class:`~tether.client.blocking.Client` and
:class:`~tether.client.aio.AsyncClient`, one method per daemon method, replies decoded
into typed records (:mod:`tether.client.replies`). ``sync.Client`` is the CLI's
transitional view of the same client with plain-JSON replies."""
