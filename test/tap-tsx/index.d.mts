export declare const importLoader: string;
export declare const testFileExtensions: string[];
export declare const plugin: () => object;
export declare const config: {
  'processinfo-load-hook': {
    type: 'boolean';
    default: boolean;
    description: string;
    nodeArgs: (keep: boolean) => string[];
  };
};
