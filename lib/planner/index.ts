export {
  PausePlanner,
  plannedUnitsInFlight,
  type PausePlannerOptions,
  type PausePlannerStats,
  type PauseStart,
  type PausePlan,
  type DropResult,
  type PauseAction,
  type PauseHandle,
  type PlannerBudgets,
  type PlannerCoordinator,
  type PlannerLinks,
  type ReplanResult,
  type RetentionHint,
} from './planner.js';
export { WaitLengthStats, WaitClass, type WaitLengthStatsOptions } from './stats.js';
export { sglangRetention, trtllmRetention, vllmKvHint, type SglangRetention, type TrtllmTokenRangeRetention, type VllmKvHint } from './hints.js';
