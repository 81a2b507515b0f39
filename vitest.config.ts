import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Property tests run tens of thousands of commands; give them room on a 2-core CI machine.
    testTimeout: 120_000,
    pool: 'forks',
  },
});
