import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Prints each reason tests were skipped for once, when the run ends (test/skip-reasons.ts).
    globalSetup: ['test/skip-summary.ts'],
    // Property tests run tens of thousands of commands; give them room on a 2-core CI machine.
    testTimeout: 120_000,
    pool: 'forks',
    // Tests that load the package without its addon (and the processes they start) would each
    // print the fallback warning; test/lease-table/native-loading.test.ts unsets this to prove it fires once.
    env: { WAITPREP_NO_FALLBACK_WARNING: '1' },
    // In CI, also write a JSON report so .ci/run can end on a plain "N passed, N failed" line.
    reporters: process.env.CI ? ['default', ['json', { outputFile: 'vitest-report.json' }]] : ['default'],
  },
});
