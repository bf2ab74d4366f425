-- LangGraph's store (`/langgraph/store/...`, `stepwise.langgraph.StepwiseStore`): a tenant's
-- JSON items by namespace (its labels joined with '.') and key, with an optional time to live
-- (`ttl_us`, microseconds; `expires_at` is when the item stops being answered).
CREATE TABLE langgraph_store_items (
    tenant_id  TEXT NOT NULL,
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    expires_at INTEGER,
    ttl_us     INTEGER,
    PRIMARY KEY (tenant_id, namespace, key)
) WITHOUT ROWID;

CREATE INDEX langgraph_store_items_expiry ON langgraph_store_items (tenant_id, expires_at)
    WHERE expires_at IS NOT NULL;
