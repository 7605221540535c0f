package dbsqlc

// This file is not generated: it exposes the SQL of queries that callers
// send in a pgx pipeline together with statements of their own (sqlc's
// methods each send one round trip). The SQL itself stays in queries/.

// InboxMessageMarkProcessedSQL is InboxMessageMarkProcessed's statement;
// its arguments are InboxMessageMarkProcessedArgs's.
const InboxMessageMarkProcessedSQL = inboxMessageMarkProcessed

// InboxMessageMarkProcessedArgs returns the arguments of
// InboxMessageMarkProcessedSQL, in order.
func InboxMessageMarkProcessedArgs(arg InboxMessageMarkProcessedParams) []any {
	return []any{arg.Now, arg.ReceivedAt, arg.ID}
}

// PlanCacheModeGenericSQL and PlanCacheModeRestoreSQL are the statements
// of PlanCacheModeGeneric and PlanCacheModeRestore; they take no arguments.
const (
	PlanCacheModeGenericSQL = planCacheModeGeneric
	PlanCacheModeRestoreSQL = planCacheModeRestore
)

// InboxMessagesMarkProcessedSQL is InboxMessagesMarkProcessed's statement;
// its arguments are InboxMessagesMarkProcessedArgs's.
const InboxMessagesMarkProcessedSQL = inboxMessagesMarkProcessed

// InboxMessagesMarkProcessedArgs returns the arguments of
// InboxMessagesMarkProcessedSQL, in order.
func InboxMessagesMarkProcessedArgs(arg InboxMessagesMarkProcessedParams) []any {
	return []any{arg.Now, arg.ReceivedAt, arg.Ids}
}
