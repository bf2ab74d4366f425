-- LangGraph's store (`/langgraph/store/...`, `stepwise.langgraph.StepwiseStore`): a tenant's
-- JSON items by namespace (its labels joined with '.') and key, with an optional time to live
-- (`ttl_us`, microseconds; `expires_at` is when the item stops being answered).
CREATE TABLE langgraph_store_items (
    tenant_id  text NOT NULL,
    namespace  text NOT NULL,
    key        text NOT NULL,
    value      text NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    expires_at bigint,
    ttl_us     bigint,
    PRIMARY KEY (tenant_id, namespace, key)
);

CREATE INDEX langgraph_store_items_expiry ON langgraph_store_items (tenant_id, expires_at)
    WHERE expires_at IS NOT NULL;
