"""Strings and the names the stored tables join back: the scratch table of the export's StringIds, and the queries
that keep the kernel and API names the stored tables refer to."""

# A scratch table of StringIds; api_name is the string without an API version suffix (cudaLaunchKernel_v7000),
# computed once per string rather than once per call.
STRINGS_TABLE = "CREATE TABLE _strings (id BIGINT, value VARCHAR, api_name VARCHAR)"


def strings_insert(src: str) -> str:
    return (f"INSERT INTO _strings BY NAME SELECT id, value, regexp_replace(value, '_v[0-9]+$', '') AS api_name "
            f"FROM {src}")


KERNEL_NAMES = """
    SELECT id, any_value(value) AS value FROM _strings
    WHERE id IN (SELECT name_id FROM kernels UNION SELECT short_name_id FROM kernels)
    GROUP BY id"""
API_NAMES = """
    SELECT id, any_value(api_name) AS name, any_value(value) AS value FROM _strings
    WHERE id IN (SELECT DISTINCT name_id FROM api_calls) GROUP BY id"""
