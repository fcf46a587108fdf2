-- @fact _kernel_classes
-- @whole-run
-- @materialize
-- @doc The operation class of each kernel name id of kernels: op_class_of() of its demangled name, the first class
-- @doc of rules/vocabulary/operation_classes.yaml whose pattern matches ('other' for none). The patterns run once per name;
-- @doc facts join this table on the integer id instead of matching the text at each use, and every phase reads
-- @doc the run's, since a name's class does not depend on when the kernel ran.
-- @column name_id StringIds id of the kernel's name (kernels.name_id; NULL for kernels without a name).
-- @column name The kernel's name (kernels.name), so a fact that needs the names of a few ids need not read every kernel.
-- @column short_name The kernel's short name (kernels.short_name).
-- @column op_class Operation class.
-- The name is an aggregate (not a DISTINCT column) so that DuckDB cannot push the regular expressions below the
-- grouping, where they would run once per kernel.
SELECT name_id, name, short_name, op_class_of(name) AS op_class
FROM (SELECT name_id, any_value(name) AS name, any_value(short_name) AS short_name FROM kernels GROUP BY name_id)
