-- SyncGate on Citus: run once on the coordinator, after `syncgate migrate` created the schema
-- there (as local tables), before the first push.
--   psql "$SYNCGATE_DATABASE_URL" -v ON_ERROR_STOP=1 -f sql/citus/distribute.sql
-- See docs/scaling.md#distributed-postgresql-citus for what goes where and why.

-- Feed data, distributed by scope and co-located: an apply's writes to one scope and a pull's
-- read of one feed stay on one node.
SELECT create_distributed_table('feeds', 'scope');
SELECT create_distributed_table('entities', 'scope', colocate_with => 'feeds');
SELECT create_distributed_table('changes', 'scope', colocate_with => 'feeds');
SELECT create_distributed_table('push_positions', 'scope', colocate_with => 'feeds');

-- Small, read-mostly tables: a copy on every node, joined locally with the feed data.
SELECT create_reference_table('households');
SELECT create_reference_table('household_members');
SELECT create_reference_table('settings');

-- The queue and everything keyed by user stay plain tables of the coordinator, where
-- FOR UPDATE SKIP LOCKED and LISTEN/NOTIFY work: jobs, applied_operations, devices, users,
-- service_keys, webhook_subscriptions, webhook_deliveries, push_registrations, push_fronts,
-- push_presence. (Added to Citus's metadata as "local tables", Citus plans every statement on
-- them, and refuses the claim's.)
