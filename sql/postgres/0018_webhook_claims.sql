-- Each claim of a message takes the next number of its row, and a resume or replay takes one too:
-- an attempt's outcome is recorded only while the message still holds its claim's number. The
-- lease's end alone was the token before, and a resume in the same millisecond as a claim let a
-- later claim end its lease at the same time as the one it overtook.
ALTER TABLE webhook_deliveries ADD COLUMN claims bigint NOT NULL DEFAULT 0;
