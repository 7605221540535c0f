-- A delivery's generation counts its replays. Each delivery job carries the
-- generation it was inserted for, and only a job of the current generation
-- may attempt the delivery or record an attempt: a replay supersedes every
-- older job of the delivery, which then finishes without sending. Jobs
-- inserted before this column existed carry no generation, which reads as 0,
-- the default here.
ALTER TABLE wharf_outbox_deliveries ADD COLUMN generation integer NOT NULL DEFAULT 0;
