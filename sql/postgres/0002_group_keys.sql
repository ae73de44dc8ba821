-- Derived data without per-derivation schema: every stored source entity carries the group its
-- derivation files it under (a food log: its loggedDate), so a group's members load by index
-- whatever the derivation. Replaces the food-log-specific expression index.
ALTER TABLE entities ADD COLUMN group_key text;

UPDATE entities SET group_key = data ->> 'loggedDate'
WHERE entity_type = 'foodLogs' AND data IS NOT NULL AND data ->> 'loggedDate' ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}$';

CREATE INDEX entities_group ON entities (scope, entity_type, group_key) WHERE group_key IS NOT NULL;

DROP INDEX entities_food_log_days;
