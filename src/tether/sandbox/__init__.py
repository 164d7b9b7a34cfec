"""Sandbox specs: parsing and resolving the YAML a user writes into a
:class:`tether.model.records.SandboxSpec`. Pure: no daemon state."""
