DROP TABLE IF EXISTS wharf_partition_drops;
DROP TABLE IF EXISTS wharf_leases;
