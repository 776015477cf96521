package orchestrate

// StepCreateTask names the hold point of a front end's create of a
// checked restore's task ("restore/create"), after the checks' steps:
// a test cuts the create there, where nothing of the step table runs.
const StepCreateTask StepName = "create"

// Hold is a front end's own hold point, op/s in the failpoint build's
// setting (failpoint_hold.go); a no-op in the shipped binary.
func (o *Orchestrator) Hold(op string, s StepName) { failpoint(o, op, s) }
