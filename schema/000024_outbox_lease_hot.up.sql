-- A concurrency slot is taken and freed twice per delivery. With expires_at
-- indexed, each of those updates wrote new entries in both of the table's
-- indexes (no HOT update), and under load the slots of a busy endpoint left
-- thousands of dead index entries for every lookup to step over until
-- autovacuum came. Without that index the updates change no indexed column
-- and stay on their page (HOT), and a fill factor leaves them room there.
-- The price: a search for free slots reads all of the endpoint's slots and
-- sorts them by expiry, which grows with the cap (about 25 slots a page; a
-- search of a 1,000-slot endpoint reads some 40 pages, where the index read
-- a few), shared by the deliveries that one search serves. Rows written
-- before this migration get the room as they move (their first update).
DROP INDEX IF EXISTS wharf_outbox_leases_free_idx;
ALTER TABLE wharf_outbox_leases SET (fillfactor = 20);
