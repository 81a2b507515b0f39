// `waitprep clean`'s usage line, apart from the command so that `waitprep clean --help` and
// `waitprep --help` print it without importing the package.
export const CLEAN_USAGE = 'waitprep clean [<table>...] [--dry-run] [--json] [--trust-uid UID] [--trust-group-writable]';
