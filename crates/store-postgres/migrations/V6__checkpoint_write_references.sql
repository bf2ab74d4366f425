-- Whether an append item of a stored checkpoint refers to this pending write (it stands for
-- the write's list). A write is referred to by one item at most: reading a thread, or
-- copying the write's value into its item before the write is deleted, then costs what
-- was sent, however many checkpoints a client forks from the same parent.
ALTER TABLE checkpoint_writes ADD COLUMN referenced BOOLEAN NOT NULL DEFAULT FALSE;
