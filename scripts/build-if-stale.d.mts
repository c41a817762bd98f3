// Types of scripts/build-if-stale.mjs for the TypeScript tests.
export declare const BUILD_INPUTS: string[];
export declare const STAMP: string;
export declare function needsBuild(newestInputMs: number | null, stampMs: number | null): boolean;
export declare function newestMtime(root: string, paths?: string[]): number | null;
export declare function buildDecision(root: string): { build: boolean; reason: string };
