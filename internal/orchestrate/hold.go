package orchestrate

// StepCreateTask names the hold point of a front end's create of a
// checked restore's task ("restore/create"), after the checks' steps:
// a test cuts the create there, where nothing of the step table runs.
const StepCreateTask StepName = "create"
