import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Property tests run tens of thousands of commands; give them room on a 2-core CI machine.
    testTimeout: 120_000,
    pool: 'forks',
    // In CI, also write a JSON report so .ci/run can end on a plain "N passed, N failed" line.
    reporters: process.env.CI ? ['default', ['json', { outputFile: 'vitest-report.json' }]] : ['default'],
  },
});
