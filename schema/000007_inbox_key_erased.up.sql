-- An event erased on request (inbox Forget) keeps its dedupe key as a
-- tombstone for jobs.Config.ErasedKeyRetention from this time, so that a
-- redelivery after the dedupe window is still a duplicate and does not
-- store the erased data again.
ALTER TABLE wharf_inbox_keys ADD COLUMN erased_at timestamptz;
