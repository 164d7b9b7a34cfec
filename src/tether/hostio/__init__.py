"""Host I/O: the leaf package every other one may use, standard library only.

Durable file replacement (:mod:`.atomic`), process identity from ``/proc``
(:mod:`.proc`) and pinned by a pidfd (:mod:`.pidfd`), real-path predicates
(:mod:`.paths`), opening files in places a sandbox can write (:mod:`.untrusted`)
and copying across such places without following a planted symlink
(:mod:`.copy`, writing to the host: :mod:`.copyout`; paths below a descriptor:
:mod:`.beneath`). It imports nothing else of tether, so the monitor process can use
it without growing.
"""
