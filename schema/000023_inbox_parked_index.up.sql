-- Messages parked behind an earlier one of their ordering key (no job, to
-- process or failing): a processing batch asks first whether any of its
-- sources has one since the batch's receipt time, and looks for the ones to
-- wake only then. Parked messages are few, and the index as small.
CREATE INDEX wharf_inbox_messages_parked_idx ON wharf_inbox_messages (source, received_at)
    WHERE job_id IS NULL AND ordering_key <> '' AND status IN ('received', 'failed');
