-- Derived data without per-derivation schema: every stored source entity carries the group its
-- derivation files it under (a food log: its loggedDate), so a group's members load by index
-- whatever the derivation. Replaces the food-log-specific expression index.
ALTER TABLE entities ADD COLUMN group_key TEXT;

UPDATE entities SET group_key = CASE WHEN json_valid(data) THEN json_extract(data, '$.loggedDate') END
WHERE entity_type = 'foodLogs' AND data IS NOT NULL;
UPDATE entities SET group_key = NULL
WHERE group_key IS NOT NULL AND (typeof(group_key) <> 'text' OR group_key NOT GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]');

CREATE INDEX entities_group ON entities (scope, entity_type, group_key) WHERE group_key IS NOT NULL;

DROP INDEX entities_food_log_days;
