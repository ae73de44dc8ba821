-- The origin of a change a device did not make: `service:<key name>` for a push with a service
-- key (the app's own backend), NULL for a device's. Pulls carry it, so an app can show "changed
-- by the server". Adding a nullable column without a default rewrites nothing.
ALTER TABLE changes ADD COLUMN origin text;
