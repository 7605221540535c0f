-- A concurrency slot is taken and freed twice per delivery. With expires_at
-- indexed, each of those updates wrote new entries in both of the table's
-- indexes (no HOT update), and under load the leases of a busy endpoint
-- left thousands of dead index entries for every lookup to step over until
-- autovacuum came. Without that index the updates change no indexed column
-- and stay on their page (HOT), and a fill factor leaves them room there:
-- an endpoint's slots stay a page or two, which a free-slot search reads
-- whole in slot order.
DROP INDEX IF EXISTS wharf_outbox_leases_free_idx;
ALTER TABLE wharf_outbox_leases SET (fillfactor = 20);
