"""What agents' turns cost: a dated price table per model (``prices``) and the sums of
priced turns by attempt, lineage, sandbox, day or model (``report``). Pure: the daemon
reads the turns from the journal and hands them here."""
